"""WAV files for tests: 16-bit PCM written with the standard library."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


def write_wav(path: Path, pcm: np.ndarray, rate: int = 16000) -> Path:
    """pcm: int16 samples, shape (n,) or (n, channels)."""
    pcm = pcm if pcm.ndim == 2 else pcm[:, None]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(pcm.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(pcm).astype("<i2").tobytes())
    return path
