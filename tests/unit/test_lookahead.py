"""Lookahead (pipeline/lookahead.py): a fork of the VAD hears waiting audio, exactly what the VAD will hear."""

import numpy as np

from specscribe.pipeline.lookahead import Lookahead
from specscribe.pipeline.vad import FRAME, SileroVad, VadOptions


class LevelModel:
    """Speech probability = the frame's sample value (frames hold constant values here)."""

    def __call__(self, frames, h, c):
        return frames[:, -FRAME:].mean(axis=1).astype(np.float32), h, c


def frames(*levels: float) -> np.ndarray:
    return np.repeat(np.asarray(levels, np.float32), FRAME)


def vad() -> SileroVad:
    return SileroVad(VadOptions(threshold=0.5, min_speech=0.1, min_silence=0.2), model=LevelModel())  # end: 6 frames


def test_the_fork_hears_the_end_in_waiting_audio_and_the_vad_is_untouched():
    v = vad()
    assert [e.kind for e in v.process(frames(*[0.9] * 5))] == ["start"]
    ahead = Lookahead(v)
    waiting = [frames(0.9, 0.9)]  # inserted, not yet heard by the VAD
    assert not ahead.hears_end(frames(0.0, 0.0, 0.0), waiting, start=True)
    assert ahead.hears_end(frames(0.0, 0.0, 0.0), waiting, start=True)  # the sixth silent frame
    assert v.offset == 5 * FRAME and v.in_speech
    for chunk in [*waiting, frames(0.0, 0.0, 0.0)]:
        v.process(chunk)
        ahead.heard()
    assert ahead._fork is not None  # the VAD is behind the fork still
    ahead.inserted(6 * FRAME)
    assert [e.kind for e in v.process(frames(0.0, 0.0, 0.0))] == ["end"]  # as the fork heard it
    ahead.heard()
    assert ahead._fork is None


def test_no_fork_starts_while_shown_audio_is_outstanding_or_no_job_runs():
    v = vad()
    v.process(frames(*[0.9] * 5))
    ahead = Lookahead(v)
    assert not ahead.hears_end(frames(0.0, 0.0), [], start=False)  # no job in flight: nothing to recall
    assert not ahead.hears_end(frames(*[0.0] * 6), [], start=True)  # the two frames before are not in the session
    assert ahead._fork is None
    ahead.inserted(8 * FRAME)  # the caller inserts them; a job starts before the VAD hears them
    assert ahead.hears_end(frames(0.0), [frames(0.0, 0.0), frames(*[0.0] * 6)], start=True)  # the end is in there
