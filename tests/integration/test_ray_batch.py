"""`specscribe transcribe --ray local` on the real model: the same text outputs as the plain local
run, byte for byte; a bad file reported alone with a non-zero exit; and a transcriber actor killed
with SIGKILL in the middle of its block, whose files are redone so that the run still finishes
every file, once.

The folder: a 62 s stretch of the lecture (several windows, so it is cut into lanes), jfk and the five
LibriVox clips, with --batch-size 2 so that the lecture's lanes depend on the audio after it in the
run (pipeline/batch.py lanes_for_file), which the Ray rows carry from the driver."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.ray]

TEXT_FORMATS = ("txt", "srt", "vtt")
# one thread per engine on both sides: two actors on two cores get one each, and on AMX CPUs the encoder's
# bf16 GEMMs give other bits at another thread count (docs/scaling.md), so the local run uses one too
COMMON = ["-f", ",".join(TEXT_FORMATS), "--model", "base", "--language", "en", "--batch-size", "2", "--threads", "1",
          "--quiet"]


def _run(inputs: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specscribe", "transcribe", str(inputs), "-o", str(out), *COMMON, *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _texts(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def folder(clips_dir: Path, tmp_path_factory) -> Path:
    from specscribe.conversations import write_wav
    from specscribe.pipeline.audio import load_audio

    root = tmp_path_factory.mktemp("ray-inputs")
    write_wav(root / "a-lecture.wav", load_audio(clips_dir / "physicsworks.wav")[: 62 * 16000], 16000)
    shutil.copy(clips_dir / "jfk.flac", root / "jfk.flac")
    for clip in sorted((clips_dir / "librivox").glob("*.wav")):
        shutil.copy(clip, root / clip.name)
    return root


@pytest.fixture(scope="module")
def local_texts(folder: Path, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("local-out")
    code, err = _finish(_run(folder, out))
    assert code == 0, err
    assert len(_texts(out)) == 7 * len(TEXT_FORMATS)
    return _texts(out)


def _transcriber_actors_working() -> list[psutil.Process]:
    """Ray actor processes of FileTranscriber that are inside a call (Ray titles them '...submit')."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ()).strip()  # Ray pads its title with spaces
        if "FileTranscriber" in cmdline and cmdline.endswith(".submit"):
            found.append(proc)
    return found


def test_ray_gives_the_local_text_with_an_actor_killed_and_a_bad_file(folder, local_texts, tmp_path):
    """One Ray run for all three properties (a Ray run costs about 10 s of start-up on its own)."""
    inputs = tmp_path / "inputs"
    shutil.copytree(folder, inputs)
    (inputs / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00not a wav at all")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "specscribe", "transcribe", str(inputs), "-o", str(out),
           *[a for a in COMMON if a != "--quiet"], "--ray", "local", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        working = _transcriber_actors_working()
        if working:
            killed = working[0].pid
            working[0].send_signal(signal.SIGKILL)
        else:
            time.sleep(0.1)
    code, err = _finish(proc)
    assert killed is not None, f"no transcriber actor was seen at work; {err}"
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == psutil.STATUS_ZOMBIE
    assert code == 1, err  # the bad file makes the exit status non-zero
    assert re.search(r"error: \S*broken\.wav: ", err), err
    assert "7 transcribed, 1 failed" in err, err  # every good file once, despite the redone block
    assert _texts(out) == local_texts  # byte for byte; nothing for the bad file, no leftover temporary file
