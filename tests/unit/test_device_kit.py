"""scripts/device_kit.py, the pieces that carry the GPU checks to the `device` tool's machine:
the model split and joined back, the PyAV stand-in read by pipeline/audio.py as PyAV itself is,
and the CTranslate2 stand-in failing on use."""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import types
import wave
from pathlib import Path

import numpy as np
import pytest

from specscribe.pipeline.audio import AudioError, load_audio

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_kit.py"


@pytest.fixture(scope="module")
def kit():
    spec = importlib.util.spec_from_file_location("device_kit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def standin(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def write_wav(path: Path, pcm: np.ndarray, rate: int = 16000, channels: int = 1) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())


def test_the_model_split_into_pieces_joins_back_to_the_same_files(kit, tmp_path):
    model = tmp_path / "base"
    model.mkdir()
    files = {"model.bin": np.random.default_rng(0).bytes(10_000), "config.json": b'{"a": 1}'}
    for name, data in files.items():
        (model / name).write_bytes(data)
    n = kit.split_model(model, tmp_path / "kit", piece=3000)
    assert n >= 4 and (tmp_path / "kit" / "run" / f"model.part{n}").is_file()  # 10 kB and tar's headers
    pieces = [tmp_path / "kit" / ("run" if k == n else f"part{k}") / f"model.part{k}" for k in range(1, n + 1)]
    assert all(p.stat().st_size == 3000 for p in pieces[:-1])
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in pieces))) as tar:
        tar.extractall(tmp_path / "joined", filter="data")
    assert {f: (tmp_path / "joined" / "base" / f).read_bytes() for f in files} == files


def test_load_audio_through_the_av_standin_gives_the_wav_samples(kit, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", standin(kit.AV_STANDIN, "av"))
    pcm = (np.sin(np.arange(8000) / 7.0) * 20000).astype(np.int16)
    write_wav(tmp_path / "jfk.flac", pcm)  # the kit's clips keep their names
    audio = load_audio(tmp_path / "jfk.flac")
    assert audio.dtype == np.float32 and np.array_equal(audio, pcm / np.float32(32768.0))

    (tmp_path / "noise.wav").write_bytes(b"not a wav file at all")
    with pytest.raises(AudioError, match="not a readable audio file"):
        load_audio(tmp_path / "noise.wav")
    write_wav(tmp_path / "cd.wav", np.zeros(2000, np.int16), rate=44100)
    with pytest.raises(AudioError, match="16 kHz mono"):
        load_audio(tmp_path / "cd.wav")


def test_the_ctranslate2_standin_imports_and_fails_on_use(kit):
    ct2 = standin(kit.CT2_STANDIN, "ctranslate2")
    assert ct2.get_cuda_device_count() == 0
    annotation = ct2.models.WhisperGenerationResult  # faster-whisper's signatures read these at import
    with pytest.raises(RuntimeError, match="not on this machine"):
        ct2.models.Whisper("folder", device="cuda")
    with pytest.raises(RuntimeError, match="not on this machine"):
        ct2.StorageView.from_array(np.zeros(3))
    assert annotation is ct2.StorageView
