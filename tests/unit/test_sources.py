"""Audio sources: file (fast and real-time pace), queue (any rate/channels)."""

import asyncio
import time
import wave

import numpy as np
import pytest

from specscribe.pipeline.audio import AudioError
from specscribe.pipeline.sources import FileSource, QueueSource


def write_wav(path, seconds=1.0, rate=44100, channels=2):
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(x, channels).tobytes())


async def collect(source):
    return [chunk async for chunk in source]


def test_file_source_fast_and_realtime(tmp_path):
    path = tmp_path / "tone.wav"
    write_wav(path, seconds=1.0)
    chunks = asyncio.run(collect(FileSource(path, chunk=0.25)))
    assert [c.size for c in chunks] == [4000] * 4  # 16 kHz mono
    assert all(c.dtype == np.float32 for c in chunks)
    t0 = time.perf_counter()
    chunks = asyncio.run(collect(FileSource(path, chunk=0.25, realtime=True)))
    assert time.perf_counter() - t0 >= 0.95  # paced: the last chunk exists after 1 s
    assert sum(c.size for c in chunks) == 16000


def test_file_source_bad_file(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all" * 10)
    with pytest.raises(AudioError, match="bad.wav"):
        FileSource(bad)


def test_queue_source_resamples_and_ends():
    async def main():
        src = QueueSource(rate=48000, channels=2)
        t = np.arange(48000) / 48000
        stereo = np.repeat(np.sin(2 * np.pi * 300 * t).astype(np.float32), 2)
        for i in range(0, stereo.size, 3001):  # odd sizes, split frames
            await src.put(stereo[i : i + 3001])
        src.end()
        with pytest.raises(RuntimeError):
            await src.put(stereo[:10])
        return await collect(src)

    out = np.concatenate(asyncio.run(main()))
    assert abs(out.size - 16000) <= 2
