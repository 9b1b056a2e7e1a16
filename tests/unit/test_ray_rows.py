"""pipeline/ray_batch.py without a Ray instance: the rows the driver builds, the decode task's
outcome for good and bad files, and the one-line hint when Ray is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from specscribe.conversations import write_wav
from specscribe.pipeline.inputs import InputItem
from specscribe.pipeline.ray_batch import decode_row, file_rows, row_item


def _wav(path: Path, seconds: float) -> Path:
    write_wav(path, np.zeros(int(seconds * 16000), np.float32), 16000)
    return path


def test_rows_carry_each_files_place_and_the_audio_after_it(tmp_path):
    a, b = _wav(tmp_path / "a.wav", 1.0), _wav(tmp_path / "b.wav", 1.0)
    items = [InputItem("a.wav", a, Path("a")), InputItem("-", None, Path("stdin"), b"bytes"),
             InputItem("sub/b.wav", b, Path("sub/b"))]
    rows = file_rows(items, [3.0, 5.0, 2.0])
    assert [r["after"] for r in rows] == [7.0, 2.0, 0.0]  # what lanes_for_file sees in a local run
    assert [r["index"] for r in rows] == [0, 1, 2]
    assert rows[0]["path"] == str(a.resolve()) and rows[1]["path"] == "" and rows[1]["data"] == b"bytes"
    assert [row_item(r) for r in rows] == [
        InputItem("a.wav", a.resolve(), Path("a")), items[1], InputItem("sub/b.wav", b.resolve(), Path("sub/b"))
    ]


def test_decode_task_gives_the_audio_or_the_reason(tmp_path):
    good = file_rows([InputItem("a.wav", _wav(tmp_path / "a.wav", 1.5), Path("a"))], [0.0])[0]
    out = decode_row(good)
    assert out["error"] == "" and out["audio"].dtype == np.float32 and len(out["audio"]) == 24000
    assert "data" not in out  # stdin's bytes do not travel on once decoded
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00not audio")
    out = decode_row(file_rows([InputItem("bad.wav", bad, Path("bad"))], [0.0])[0])
    assert out["error"].startswith("not a readable audio file") and len(out["audio"]) == 0


def test_without_ray_the_flag_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    from specscribe.cli import main

    clip = _wav(tmp_path / "a.wav", 0.5)
    out = tmp_path / "out"
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code = main(["transcribe", str(clip), "-o", str(out), "--ray", "local"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "specscribe: error: --ray needs Ray Data: pip install 'specscribe[ray]'"
    assert not out.exists()


def test_skip_existing_skips_on_the_driver_without_starting_ray(monkeypatch, tmp_path):
    from specscribe.pipeline.batch import BatchOptions
    from specscribe.pipeline.ray_batch import RayOptions, run_ray_batch

    clip = _wav(tmp_path / "a.wav", 0.5)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("done before\n")
    started = []

    class NoRay:  # run_ray_batch must not get as far as ray.init
        @staticmethod
        def is_initialized():
            started.append(True)
            return False

    monkeypatch.setattr("specscribe.pipeline.ray_batch.import_ray", lambda: NoRay)
    options = BatchOptions(output_dir=out, skip_existing=True, quiet=True)
    report = run_ray_batch([InputItem("a.wav", clip, Path("a"))], options, RayOptions())
    assert (report.done, report.failed, report.skipped) == (0, 0, 1) and not started
    assert (out / "a.txt").read_text() == "done before\n"


def test_an_actor_reports_each_row_even_when_two_inputs_share_a_display_name(monkeypatch, tmp_path):
    """The same file given twice: two rows, one display name, two stems (pipeline/inputs.py). Each row gets its
    own outcome (they were keyed by the display name: one file's result stood for both)."""
    from types import SimpleNamespace

    from specscribe.pipeline import ray_batch

    clip = _wav(tmp_path / "a.wav", 1.0)
    items = [InputItem("a.wav", clip, Path("a.1")), InputItem("a.wav", clip, Path("a.2")),
             InputItem("b.wav", tmp_path / "missing.wav", Path("b"))]
    rows = [decode_row(r) for r in file_rows(items, [1.0, 1.0, 1.0])]

    class OneFails:  # the first file transcribes, the second fails on its own
        def __init__(self, transcriber, options, progress, report):
            self.report = report

        def run(self, items, after, load):
            assert [i.stem for i in items] == [Path("a.1"), Path("a.2")] and len(load(items[0])) == 16000
            self.report(items[0], SimpleNamespace(duration=1.0), "")
            self.report(items[1], None, "decode failed")

    monkeypatch.setattr(ray_batch, "_FileRun", OneFails)
    actor = ray_batch.FileTranscriber.__new__(ray_batch.FileTranscriber)  # no engine: _FileRun is the fake
    actor.options, actor.transcriber = None, None
    batch = {k: np.array([r[k] for r in rows], dtype=object) for k in rows[0]}
    out = actor(batch)
    assert out["index"] == [0, 1, 2] and out["display"] == ["a.wav", "a.wav", "b.wav"]
    assert out["error"][:2] == ["", "decode failed"] and out["seconds"][:2] == [1.0, 0.0]
    assert out["error"][2] == "no such file" and out["seconds"][2] == 0.0  # b's own read error
