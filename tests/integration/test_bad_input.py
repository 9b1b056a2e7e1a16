"""Bad input through the real CLI (subprocess): a folder with a corrupt file, a zero-length file,
a non-audio file and pure silence next to good clips, plus an explicit text file and stdin.

Every good input is transcribed; each bad one gets exactly one error line; silence gives an
empty transcript; the exit status is non-zero; no output exists for a bad file; a second run
with --skip-existing leaves the finished outputs alone.

Runs the CLI as users meet it: the default engine (spec), no --engine flag.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

FORMATS = ("txt", "srt", "vtt", "json", "tsv")


def _cli(args, stdin: bytes | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "specscribe", "transcribe", *args], input=stdin, capture_output=True,
        timeout=timeout, env=env,
    )


def _write_silence(path: Path, seconds: float) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.zeros(int(seconds * 16000), dtype="<i2").tobytes())


@pytest.fixture(scope="module")
def batch(tmp_path_factory, clips_dir: Path, base_model_dir):
    root = tmp_path_factory.mktemp("bad")
    src = root / "in"
    (src / "sub").mkdir(parents=True)
    shutil.copy(clips_dir / "jfk.flac", src / "good_jfk.flac")
    librivox = sorted((clips_dir / "librivox").glob("*.wav"))[0]
    shutil.copy(librivox, src / "sub" / "good_book.wav")
    jfk = (clips_dir / "jfk.flac").read_bytes()
    rng = np.random.default_rng(0)
    (src / "corrupt.flac").write_bytes(jfk[:42] + rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes())
    (src / "truncated.flac").write_bytes(jfk[:200])
    (src / "empty.wav").write_bytes(b"")
    (src / "notes.mp3").write_text("these are my notes, not audio\n" * 20)
    (src / "readme.txt").write_text("ignored: not a media extension inside a folder\n")
    _write_silence(src / "silence.wav", 8.0)
    explicit_text = root / "letter.txt"
    explicit_text.write_text("an explicit non-audio file is still tried and reported\n")
    out = root / "out"
    args = [str(src), str(explicit_text), "-", "-f", "all", "-o", str(out), "--language", "en"]
    proc = _cli(args, stdin=(clips_dir / "jfk.flac").read_bytes())
    return src, out, explicit_text, args, proc


def _error_lines(stderr: bytes) -> list[str]:
    return [l for l in stderr.decode().splitlines() if l.startswith("specscribe: error:")]


def test_exit_status_nonzero_and_no_traceback(batch):
    _, _, _, _, proc = batch
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def test_one_error_line_per_bad_file(batch):
    src, _, explicit_text, _, proc = batch
    lines = _error_lines(proc.stderr)
    bad = [src / "corrupt.flac", src / "truncated.flac", src / "empty.wav", src / "notes.mp3", explicit_text]
    for path in bad:
        mine = [l for l in lines if l.startswith(f"specscribe: error: {path}: ")]
        assert len(mine) == 1, (path, lines)
        assert len(mine[0]) > len(f"specscribe: error: {path}: ") + 5  # a reason is given
    assert len(lines) == len(bad), lines
    assert "empty" in next(l for l in lines if "empty.wav" in l)


def test_good_files_transcribed_and_bad_ones_leave_nothing(batch):
    _, out, _, _, proc = batch
    for stem in ("good_jfk", "sub/good_book", "stdin", "silence"):
        for fmt in FORMATS:
            assert (out / f"{stem}.{fmt}").is_file(), (stem, fmt, proc.stderr.decode())
    assert "ask not what your country" in (out / "good_jfk.txt").read_text().lower()
    assert "ask not what your country" in (out / "stdin.txt").read_text().lower()
    stats = json.loads((out / "good_jfk.json").read_text())["stats"]
    assert stats["target_passes"] > 0  # the spec engine decoded it (ct2 counts no target passes)
    assert len((out / "sub" / "good_book.txt").read_text().split()) >= 3
    produced = {p.name.split(".")[0] for p in out.rglob("*") if p.is_file()}
    assert produced == {"good_jfk", "good_book", "stdin", "silence"}
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_silence_gives_an_empty_transcript(batch):
    _, out, _, _, _ = batch
    assert (out / "silence.txt").read_text() == ""
    assert (out / "silence.srt").read_text().strip() == ""
    doc = json.loads((out / "silence.json").read_text())
    assert doc["segments"] == [] and doc["text"] == ""


def test_skip_existing_resumes_without_redoing(batch):
    src, out, explicit_text, args, _ = batch
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    proc = _cli([str(src), "-f", "all", "-o", str(out), "--skip-existing", "--quiet"])
    assert proc.returncode == 1  # the bad files are tried again and fail again
    assert len(_error_lines(proc.stderr)) == 4
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert before == after


def test_missing_model_one_line_naming_the_install_command(tmp_path, clips_dir, monkeypatch):
    env_home = tmp_path / "home"
    env = dict(os.environ, SPECSCRIBE_HOME=str(env_home), PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-m", "specscribe", "transcribe", str(clips_dir / "jfk.flac"),
         "-o", str(tmp_path / "o"), "--quiet"],
        capture_output=True, env=env, timeout=300,
    )
    assert proc.returncode == 1
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "specscribe models install base" in lines[0], lines
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
