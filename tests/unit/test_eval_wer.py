"""scripts/eval_wer.py on a folder of transcripts: a clip without one counts as all deletions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "eval_wer.py"


@pytest.fixture
def eval_wer(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("eval_wer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    refs = {tmp_path / "a.flac": "the cat sat on the mat", tmp_path / "b.wav": "ask not what your country"}
    monkeypatch.setattr(module, "references", lambda: refs)
    return module


def _run(module, folder: Path, capsys) -> tuple[int, dict]:
    status = module.main(["--outputs", str(folder)])
    return status, json.loads(capsys.readouterr().out)


def test_every_transcript_present(eval_wer, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("The cat sat on the mat.")
    (out / "b.txt").write_text("Ask not what your county")
    status, result = _run(eval_wer, out, capsys)
    assert status == 0
    assert result["corpus_wer"] == pytest.approx(1 / 11, abs=1e-4)
    assert [c["missing"] for c in result["clips"]] == [False, False]


def test_a_missing_transcript_is_all_deletions(eval_wer, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("The cat sat on the mat.")
    status, result = _run(eval_wer, out, capsys)
    assert status == 1
    assert result["corpus_wer"] == pytest.approx(5 / 11, abs=1e-4)  # b's 5 words deleted, not dropped
    b = next(c for c in result["clips"] if c["clip"] == "b.wav")
    assert b["missing"] and b["wer"] == 1.0 and b["hypothesis"] == ""
