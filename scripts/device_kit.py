"""Pack what the GPU machine of the `device` tool needs to run tests/gpu and the CUDA benchmarks.

That machine has torch (CUDA), numpy, tokenizers, onnxruntime and pytest, but no registry, no
faster-whisper, PyAV or CTranslate2, and a call carries at most 64 MiB with the working tree
(about 22 MB of it tracked). The base model alone is 145 MB. So the kit comes in pieces:

    .gpu/part1 .. .gpu/partN   the model folder as a tar, split (one `device` call each, which
                               copies its piece to /root/kit/ on the warm machine)
    .gpu/run/                  the last piece, the clips and site-packages for the last call:
      wheels/                  faster-whisper, jiwer, whisper-normalizer, soxr ... (unpacked there)
      site/                    two stand-ins: `av` reads 16 kHz mono 16-bit WAV
                               (the clips below are such WAVs under their own names), and
                               `ctranslate2` fails on use (faster-whisper imports it; the kit
                               runs the spec engine only)
      clips/                   the clips, decoded here to 16 kHz mono 16-bit WAV (load_audio
                               decodes to exactly these samples)

Then scripts/gpu_check.sh, run there with `.gpu/run` carried, joins the pieces and runs the
checks. Here:

    python scripts/device_kit.py [--out .gpu] [--piece-mb 42]

`.gpu/` is in .gitignore. The machine stays warm 30 s after a call: make the calls back to back.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import wave
from pathlib import Path

WHEELS = ("faster-whisper==1.2.1", "jiwer", "rapidfuzz", "click", "whisper-normalizer", "more-itertools", "soxr")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

AV_STANDIN = '''"""A stand-in for PyAV on the GPU machine (scripts/device_kit.py): it reads 16 kHz mono 16-bit
WAV files whatever their names (the kit's clips are such files), as pipeline/audio.py asks."""
import wave as _wave

import numpy as _np


class error:
    class FFmpegError(Exception):
        strerror = None

    class InvalidDataError(FFmpegError):
        pass


class _Frame:
    def __init__(self, pcm):
        self.pcm = pcm

    def to_ndarray(self):
        return self.pcm.reshape(1, -1)


class AudioResampler:
    def __init__(self, format="s16", layout="mono", rate=16000):
        if (format, layout, rate) != ("s16", "mono", 16000):
            raise ValueError("the kit's av resamples nothing: 16 kHz mono s16 only")

    def resample(self, frame):
        return [] if frame is None else [frame]


class _Container:
    def __init__(self, source):
        try:
            with _wave.open(source, "rb") as w:
                shape = (w.getnchannels(), w.getsampwidth(), w.getframerate())
                data = w.readframes(w.getnframes())
        except (_wave.Error, EOFError) as exc:
            raise error.InvalidDataError(str(exc)) from None
        if shape != (1, 2, 16000):
            raise error.FFmpegError(f"the kit's av reads 16 kHz mono 16-bit WAV only, not {shape}")
        self.pcm = _np.frombuffer(data, "<i2")
        self.duration = int(len(self.pcm) / 16000 * 1_000_000)
        self.streams = type("Streams", (), {"audio": [0]})()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def decode(self, audio=0):
        yield _Frame(self.pcm)


def open(source, mode="r", metadata_errors="ignore"):
    return _Container(source)
'''

CT2_STANDIN = '''"""A stand-in for CTranslate2 on the GPU machine (scripts/device_kit.py): faster-whisper imports
it, and the kit runs the spec engine only. Any use raises."""
__version__ = "0+kit"


class _Missing:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("CTranslate2 is not on this machine (scripts/device_kit.py)")

    @classmethod
    def from_array(cls, *args):
        return cls()


class _Namespace:
    def __getattr__(self, name):
        return _Missing


models = _Namespace()


def get_cuda_device_count():
    return 0


def __getattr__(name):
    return _Missing
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_clips(dest: Path) -> None:
    """Every clip the GPU checks read, decoded to 16 kHz mono 16-bit WAV under its own name."""
    from specscribe.clips import batch_set, clips_dir
    from specscribe.pipeline.audio import load_audio

    source = clips_dir()
    names = {p.relative_to(source) for p, _ in batch_set()} | {Path("multilingual.mp3")}
    for name in sorted(names):
        pcm = (load_audio(source / name) * 32768.0).round().clip(-32768, 32767).astype("<i2")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        with wave.open(str(dest / name), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(pcm.tobytes())
    shutil.copy(source / "librivox" / "transcription", dest / "librivox" / "transcription")


def write_site(wheels: Path, dest: Path) -> None:
    """The wheels for Python 3.12 (unpacked there: a wheel is its site-packages content, and packed
    they carry in a third of the bytes) and the two stand-ins."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(wheels)]
    cmd += [f"--platform={p}" for p in PLATFORMS]
    subprocess.run(cmd + list(WHEELS), check=True)
    (dest / "av").mkdir(parents=True)
    (dest / "av" / "__init__.py").write_text(AV_STANDIN)
    (dest / "ctranslate2").mkdir()
    (dest / "ctranslate2" / "__init__.py").write_text(CT2_STANDIN)


def split_model(model: Path, out: Path, piece: int) -> int:
    """The model folder as a tar (base/...), in pieces of `piece` bytes: out/partK/model.partK, the
    last in out/run/. Returns the number of pieces."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(model, arcname=model.name)
    data = buffer.getvalue()
    pieces = [data[i : i + piece] for i in range(0, len(data), piece)]
    for k, chunk in enumerate(pieces, 1):
        folder = out / ("run" if k == len(pieces) else f"part{k}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"model.part{k}").write_bytes(chunk)
    return len(pieces)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".gpu", help="the kit's folder (ignored by git)")
    parser.add_argument("--model", default="base")
    parser.add_argument("--piece-mb", type=float, default=42.0, help="bytes a call carries for the model")
    args = parser.parse_args(argv)
    from specscribe.models.registry import resolve_model

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    (out / "run").mkdir(parents=True)
    n = split_model(resolve_model(args.model), out, int(args.piece_mb * 1e6))
    write_clips(out / "run" / "clips")
    write_site(out / "run" / "wheels", out / "run" / "site")
    for folder in sorted(out.iterdir()):
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        log(f"{folder}: {size / 1e6:.1f} MB")
    calls = " ".join(f"carry={out}/part{k}" for k in range(1, n))
    log(f"{n} pieces: {calls}, then carry={out}/run with `bash scripts/gpu_check.sh`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
