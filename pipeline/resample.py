"""Streaming conversion of any PCM stream to what the pipeline eats: float32 mono at SAMPLE_RATE.

Channels are averaged (downmix), then soxr's streaming resampler (a proper band-limited filter,
not sample dropping) converts the rate. Chunks may be any length, even a partial frame: the
resampler keeps the filter state and any incomplete interleaved frame for the next call.
"""

from __future__ import annotations

import numpy as np
import soxr

from specscribe.pipeline.audio import SAMPLE_RATE

MAX_CHANNELS = 32
MIN_RATE, MAX_RATE = 4_000, 384_000


class Resampler:
    """One stream's stateful resampler (never share one between streams).

    Args:
        in_rate: input sample rate in Hz (4 kHz ... 384 kHz).
        channels: interleaved channels in the input (1 ... 32).
    """

    def __init__(self, in_rate: int, channels: int = 1, quality: str = "HQ") -> None:
        if not isinstance(in_rate, (int, np.integer)) or not MIN_RATE <= in_rate <= MAX_RATE:
            raise ValueError(f"sample rate must be an integer from {MIN_RATE} to {MAX_RATE} Hz, got {in_rate!r}")
        if not isinstance(channels, (int, np.integer)) or not 1 <= channels <= MAX_CHANNELS:
            raise ValueError(f"channels must be an integer from 1 to {MAX_CHANNELS}, got {channels!r}")
        self.in_rate = int(in_rate)
        self.channels = int(channels)
        self._stream = (
            None if self.in_rate == SAMPLE_RATE else soxr.ResampleStream(self.in_rate, SAMPLE_RATE, 1, "float32", quality)
        )
        self._leftover = np.zeros(0, dtype=np.float32)  # an incomplete interleaved frame, (< channels,)
        self._flushed = False

    def process(self, samples: np.ndarray) -> np.ndarray:
        """samples: interleaved PCM (n_frames * channels,), float (any dtype) in [-1, 1] or int16.

        Returns float32 mono at SAMPLE_RATE, shape (m,); m may be 0 while the filter fills.
        """
        if self._flushed:
            raise RuntimeError("Resampler.process() after flush()")
        x = _as_float32(samples)
        if self._leftover.size:
            x = np.concatenate([self._leftover, x])
        usable = x.size - x.size % self.channels
        self._leftover = x[usable:].copy()
        x = x[:usable]
        if self.channels > 1:
            x = x.reshape(-1, self.channels).mean(axis=1, dtype=np.float32)  # (n_frames,)
        if self._stream is None:
            return np.ascontiguousarray(x, dtype=np.float32)
        return self._stream.resample_chunk(np.ascontiguousarray(x, dtype=np.float32))

    def flush(self) -> np.ndarray:
        """End of stream: the samples still inside the filter, float32 (m,). Call once."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        return self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)


def _as_float32(samples: np.ndarray) -> np.ndarray:
    x = np.asarray(samples)
    if x.ndim != 1:
        x = x.reshape(-1)  # (frames, channels) arrays are interleaved already in C order
    if x.dtype == np.int16:
        return x.astype(np.float32) / 32768.0
    if x.dtype.kind == "i":
        raise ValueError(f"integer PCM must be int16, got {x.dtype}")
    return x.astype(np.float32, copy=False)
