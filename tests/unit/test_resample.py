"""Resampler: rates and channels to 16 kHz mono, streaming in odd chunk sizes."""

import numpy as np
import pytest

from specscribe.pipeline.resample import Resampler


def _stream(resampler: Resampler, x: np.ndarray, rng) -> np.ndarray:
    out, i = [], 0
    while i < x.size:
        n = int(rng.integers(1, 5000))  # odd sizes, partial frames included
        out.append(resampler.process(x[i : i + n]))
        i += n
    out.append(resampler.flush())
    return np.concatenate(out)


def _peak_hz(y: np.ndarray, rate: int = 16000) -> float:
    spec = np.abs(np.fft.rfft(y * np.hanning(y.size)))
    return float(np.fft.rfftfreq(y.size, 1 / rate)[np.argmax(spec)])


@pytest.mark.parametrize("rate", [8000, 44100, 48000, 16000, 22050])
@pytest.mark.parametrize("channels", [1, 2])
def test_sine_keeps_frequency_and_length(rate, channels):
    rng = np.random.default_rng(rate + channels)
    seconds, freq = 2.0, 440.0
    t = np.arange(int(rate * seconds)) / rate
    mono = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    frames = np.stack([mono] * channels, axis=1)  # (n, channels)
    y = _stream(Resampler(rate, channels), frames.reshape(-1), rng)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(y.size - 16000 * seconds) <= 2
    assert abs(_peak_hz(y) - freq) < 2.0
    mid = y[2000:-2000]
    assert 0.45 < np.max(np.abs(mid)) < 0.55  # amplitude preserved, no clipping


def test_stereo_is_averaged_not_dropped():
    rate = 48000
    t = np.arange(rate) / rate
    left = np.sin(2 * np.pi * 300 * t)
    right = np.sin(2 * np.pi * 1000 * t)
    x = np.stack([left, right], 1).astype(np.float32).reshape(-1)
    r = Resampler(rate, 2)
    y = np.concatenate([r.process(x), r.flush()])
    spec = np.abs(np.fft.rfft(y))
    freqs = np.fft.rfftfreq(y.size, 1 / 16000)
    top2 = sorted(freqs[np.argsort(spec)[-2:]].round())
    assert top2 == [300.0, 1000.0]


def test_anti_aliasing_removes_content_above_8k():
    rate = 48000
    t = np.arange(rate) / rate
    x = np.sin(2 * np.pi * 12000 * t).astype(np.float32)  # would alias to 4 kHz if decimated naively
    r = Resampler(rate, 1)
    y = np.concatenate([r.process(x), r.flush()])
    assert np.sqrt(np.mean(y[1000:-1000] ** 2)) < 0.01


def test_int16_input_and_bad_arguments():
    r = Resampler(16000, 1)
    y = r.process(np.array([16384, -32768], dtype=np.int16))
    np.testing.assert_allclose(y, [0.5, -1.0])
    with pytest.raises(ValueError):
        Resampler(0, 1)
    with pytest.raises(ValueError):
        Resampler(16000, 0)
    with pytest.raises(ValueError):
        r.process(np.array([1, 2], dtype=np.int32))
