"""The batch progress bar: files done, audio done (seconds, or hours for long batches), speed."""

from __future__ import annotations

import io

from specscribe.pipeline.progress import BatchProgress


def _bar_text(total: float, steps: list[tuple[str, float]]) -> tuple[BatchProgress, str]:
    stream = io.StringIO()
    progress = BatchProgress(total, len(steps), True, stream)
    for name, seconds in steps:
        progress.start_file(name, name, seconds)
        progress.advance_file(name, seconds / 2)
        progress.finish_file(name, seconds)
    progress.close()
    return progress, stream.getvalue()


def test_short_batches_count_seconds_of_audio():
    progress, text = _bar_text(90.0, [("a.wav", 60.0), ("b.wav", 30.0)])
    assert progress.files_done == 2 and progress.audio_done == 90.0
    assert "batch 2/2" in text and "90/90 s audio" in text and "x real time" in text


def test_long_batches_count_hours_of_audio():
    progress, text = _bar_text(3 * 3600.0, [("a.wav", 3600.0), ("b.wav", 7200.0)])
    assert progress.audio_done == 3 * 3600.0
    assert "3.00/3.00 h audio" in text and "1.00/3.00 h audio" in text


def test_a_failed_file_counts_as_done_without_audio():
    stream = io.StringIO()
    progress = BatchProgress(10.0, 2, False, stream)
    progress.finish_file(None)
    progress.finish_file(None, 4.0)
    assert (progress.files_done, progress.audio_done) == (2, 4.0) and stream.getvalue() == ""
