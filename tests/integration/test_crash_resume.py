"""kill -9 of a real `specscribe transcribe` in the middle of a folder loses nothing: no partial output
is left under an output name, and a rerun with --skip-existing finishes the rest, giving exactly the
files of an uninterrupted run. ct2 engine, one file at a time (--batch-size 1), so the kill lands
between files with others still to do."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FORMATS = ("txt", "srt", "json")
COMMON = ["-f", ",".join(FORMATS), "--engine", "ct2", "--model", "base", "--batch-size", "1", "--quiet"]


def _transcribe(inputs: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specscribe", "transcribe", str(inputs), "-o", str(out), *COMMON, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outputs(out: Path) -> dict[str, str]:
    """Every non-hidden file under out, by relative path; json without its wall-clock figures."""
    found = {}
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".json":
                doc = json.loads(text)  # a truncated json would not parse
                doc.pop("timing", None)
                doc["stats"] = {k: v for k, v in doc.get("stats", {}).items() if not k.endswith("_ms")}
                text = json.dumps(doc, sort_keys=True)
            found[str(path.relative_to(out))] = text
    return found


@pytest.fixture(scope="module")
def folder(clips_dir: Path, tmp_path_factory) -> Path:
    """jfk + the five LibriVox clips (about 36 s of audio), jfk in a sub-folder."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "sub").mkdir()
    shutil.copy(clips_dir / "jfk.flac", root / "sub" / "jfk.flac")
    for wav in sorted((clips_dir / "librivox").glob("*.wav")):
        shutil.copy(wav, root / wav.name)
    return root


@pytest.fixture(scope="module")
def reference(folder: Path, base_model_dir, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("reference")
    proc = _transcribe(folder, out)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    found = _outputs(out)
    assert len(found) == 6 * len(FORMATS)
    return found


def test_kill_9_mid_folder_then_skip_existing_finishes_it(folder, reference, tmp_path):
    out = tmp_path / "out"
    proc = _transcribe(folder, out)
    deadline = time.monotonic() + 600
    try:
        while not any(p.suffix == ".json" and not p.name.startswith(".") for p in out.rglob("*")):
            assert proc.poll() is None, "the batch ended before any output appeared"
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    partial = _outputs(out)
    assert 0 < len(partial) < len(reference), "the kill must land with files still to do"
    for name, text in partial.items():  # whatever exists under an output name is complete and right
        assert text == reference[name], name

    rerun = _transcribe(folder, out, "--skip-existing")
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    assert _outputs(out) == reference
    assert not [p for p in out.rglob("*") if p.name.startswith(".")], "temp files left behind"
