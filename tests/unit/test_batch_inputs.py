"""Input collection for batch runs: folder walking, output stems, stdin, missing inputs, resume."""

from __future__ import annotations

from pathlib import Path

from specscribe.pipeline.batch import BatchOptions, BatchReport, _should_skip, _split, summary_line
from specscribe.pipeline.inputs import InputItem, collect_inputs, seconds_after


def _touch(path: Path, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_folders_walked_recursively_for_media_only(tmp_path: Path):
    _touch(tmp_path / "a.wav")
    _touch(tmp_path / "deep" / "er" / "b.MP4")
    _touch(tmp_path / "notes.txt")
    _touch(tmp_path / ".hidden" / "c.wav")
    items, errors = collect_inputs([str(tmp_path)])
    assert errors == []
    assert [it.stem for it in items] == [Path("a"), Path("deep/er/b")]


def test_explicit_file_tried_whatever_its_extension_and_missing_reported(tmp_path: Path):
    text = _touch(tmp_path / "letter.txt")
    items, errors = collect_inputs([str(text), str(tmp_path / "nope.wav")])
    assert [it.path for it in items] == [text]
    assert errors == [f"{tmp_path / 'nope.wav'}: no such file or directory"]


def test_empty_folder_is_an_error(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    items, errors = collect_inputs([str(tmp_path / "empty")])
    assert items == [] and "no audio or video files" in errors[0]


def test_same_stem_keeps_extension_and_stdin_named_stdin(tmp_path: Path):
    a, b = _touch(tmp_path / "x.wav"), _touch(tmp_path / "x.mp3")
    items, _ = collect_inputs([str(a), str(b), "-"], stdin=b"RIFF")
    assert [str(it.stem) for it in items] == ["x.wav", "x.mp3", "stdin"]
    assert items[2].path is None and items[2].data == b"RIFF" and items[2].display == "-"


def test_same_file_name_in_two_folders_gets_its_folder_in_front(tmp_path: Path):
    a, b = _touch(tmp_path / "col" / "a" / "x.wav"), _touch(tmp_path / "col" / "b" / "x.wav")
    c, d = _touch(tmp_path / "col" / "b" / "x.mp3"), _touch(tmp_path / "y.wav")
    items, _ = collect_inputs([str(a), str(b), str(c), str(d)])
    assert [str(it.stem) for it in items] == ["a/x.wav", "b/x.wav", "x.mp3", "y"]  # y and x.mp3 as before
    again, _ = collect_inputs([str(a), str(b), str(c), str(d)])
    assert [it.stem for it in again] == [it.stem for it in items]  # the same names on every run


def test_two_folders_with_the_same_relative_path_get_the_folder_in_front(tmp_path: Path):
    for top in ("d1", "d2"):
        _touch(tmp_path / top / "s.wav")
        _touch(tmp_path / top / "sub" / "t.wav")
    _touch(tmp_path / "d2" / "only.wav")
    items, _ = collect_inputs([str(tmp_path / "d1"), str(tmp_path / "d2")])
    assert [str(it.stem) for it in items] == ["d1/s.wav", "d1/sub/t.wav", "only", "d2/s.wav", "d2/sub/t.wav"]


def test_the_same_file_twice_gets_a_number_and_no_name_is_taken_twice(tmp_path: Path):
    x = _touch(tmp_path / "d" / "x.wav")
    items, _ = collect_inputs([str(x), str(tmp_path / "d"), str(x), "-", "-"], stdin=b"RIFF")
    assert [str(it.stem) for it in items] == ["x.wav", "x.wav-2", "x.wav-3", "stdin", "stdin-2"]
    # a clash must not take a name another input has: here "b/x.wav" is a walked folder's own stem
    _touch(tmp_path / "w" / "b" / "x.wav.flac")
    a, b = _touch(tmp_path / "c" / "a" / "x.wav"), _touch(tmp_path / "c" / "b" / "x.wav")
    items, _ = collect_inputs([str(tmp_path / "w"), str(a), str(b)])
    assert [str(it.stem) for it in items] == ["b/x.wav", "a/x.wav", "c/b/x.wav"]


def test_skip_existing_checks_each_clashing_inputs_own_outputs(tmp_path: Path):
    a, b = _touch(tmp_path / "in" / "a" / "x.wav"), _touch(tmp_path / "in" / "b" / "x.wav")
    items, _ = collect_inputs([str(a), str(b)])
    out = tmp_path / "out"
    options = BatchOptions(formats=("txt",), output_dir=out, skip_existing=True)
    _touch(out / items[0].stem.with_name(items[0].stem.name + ".txt"))  # only a/x.wav was done
    assert [_should_skip(it, options) for it in items] == [True, False]


def test_skip_existing_needs_every_output(tmp_path: Path):
    item = InputItem("a.wav", tmp_path / "a.wav", Path("a"))
    options = BatchOptions(formats=("txt", "srt"), output_dir=tmp_path, skip_existing=True)
    _touch(tmp_path / "a.txt")
    assert not _should_skip(item, options)
    _touch(tmp_path / "a.srt")
    assert _should_skip(item, options)
    assert not _should_skip(item, BatchOptions(formats=("txt", "srt"), output_dir=tmp_path))


def test_split_balances_by_size(tmp_path: Path):
    items = [InputItem(str(p), p, Path(p.stem)) for p in (_touch(tmp_path / f"{i}.wav", s) for i, s in enumerate([100, 1, 50, 60]))]
    shares = _split(items, 2)
    assert [[it.path.name for it in share] for share in shares] == [["0.wav", "2.wav"], ["3.wav", "1.wav"]]


def test_summary_line():
    line = summary_line(BatchReport(done=2, failed=1, skipped=3, audio_seconds=60.0, wall_seconds=6.0))
    assert line == "specscribe: 2 transcribed, 1 failed, 3 skipped (outputs exist); 60.0 s of audio in 6.0 s (10.0x real time)"
    # a rerun with --skip-existing that had nothing left to do: no "0.0 s of audio in 0.3 s (0.0x real time)"
    assert summary_line(BatchReport(done=0, skipped=3, wall_seconds=0.3)) == "specscribe: 0 transcribed, 3 skipped (outputs exist)"


def test_lanes_for_file_fills_the_batch_and_keeps_whole_files_when_it_can():
    from specscribe.pipeline.batch import lanes_for_file

    assert lanes_for_file(8, 200, 200) == 8  # the last (or only) file: the whole batch
    assert lanes_for_file(8, 200, 240) == 7  # a lecture before 40 s of short clips: most of the batch
    assert lanes_for_file(8, 5, 240) == 1  # a short clip among long files: whole
    assert lanes_for_file(8, 60, 480) == 1  # eight files of a minute: each whole (Whisper's own decode)
    assert lanes_for_file(1, 200, 200) == 1 and lanes_for_file(8, 0, 0) == 1


def test_the_cli_default_batch_size_is_the_pipelines():
    from specscribe.commands.transcribe import DEFAULT_BATCH_SIZE as cli_default
    from specscribe.pipeline.batch import DEFAULT_BATCH_SIZE, BatchOptions

    assert cli_default == DEFAULT_BATCH_SIZE == BatchOptions().batch_size


def test_seconds_after_counts_the_audio_still_to_come():
    assert seconds_after([3.0, 5.0, 2.0]) == [7.0, 2.0, 0.0]
    assert seconds_after([]) == []
