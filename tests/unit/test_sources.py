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


class FakeSoundDevice:
    """sounddevice's surface that MicrophoneSource uses: two inputs at 48 kHz; the stream's
    callback gets 0.1 s blocks of a 440 Hz tone from PortAudio's (here: a plain) thread."""

    class PortAudioError(Exception):
        pass

    class default:
        device = (1, 3)

    def __init__(self, blocks: int = 10):
        self.blocks = blocks
        self.opened: dict = {}

    def query_devices(self):
        return [
            {"name": "HDMI out", "max_input_channels": 0, "default_samplerate": 48000.0},
            {"name": "USB Mic", "max_input_channels": 2, "default_samplerate": 48000.0},
            {"name": "Webcam Mic", "max_input_channels": 1, "default_samplerate": 48000.0},
        ]

    def InputStream(self, device, channels, samplerate, dtype, blocksize, callback):  # noqa: N802
        import threading
        from types import SimpleNamespace

        self.opened = {"device": device, "channels": channels, "rate": samplerate, "blocksize": blocksize}
        fake = self

        class Stream:
            def start(self):
                def run():
                    t = np.arange(blocksize) / samplerate
                    for k in range(fake.blocks):
                        block = (0.3 * np.sin(2 * np.pi * 440 * (t + k * blocksize / samplerate))).astype(np.float32)
                        callback(block[:, None], blocksize, None, SimpleNamespace(input_overflow=False))

                self.thread = threading.Thread(target=run)
                self.thread.start()

            def stop(self):
                self.thread.join()

            def close(self):
                fake.opened["closed"] = True

        return Stream()


def test_microphone_source_resolves_devices_and_resamples(monkeypatch):
    from specscribe.pipeline import sources

    fake = FakeSoundDevice(blocks=10)
    monkeypatch.setattr(sources, "_sounddevice", lambda: fake)
    assert [d.name for d in sources.list_input_devices()] == ["USB Mic", "Webcam Mic"]
    assert sources.resolve_device(None).name == "USB Mic"  # the default input
    assert sources.resolve_device("webcam").index == 2 and sources.resolve_device(1).name == "USB Mic"
    with pytest.raises(AudioError, match="more than one"):
        sources.resolve_device("mic")
    with pytest.raises(AudioError, match="no input device matches"):
        sources.resolve_device("speaker")

    async def capture():
        mic = sources.MicrophoneSource("USB")
        got = []
        async for chunk in mic:
            got.append(chunk)
            if sum(c.size for c in got) >= 14_000:  # ~0.9 s at 16 kHz: stop like Ctrl-C would
                await mic.close()
        return got

    chunks = asyncio.run(capture())
    audio = np.concatenate(chunks)
    assert fake.opened["rate"] == 48000 and fake.opened["device"] == 1 and fake.opened.get("closed")
    assert audio.dtype == np.float32 and 14_000 <= audio.size <= 16_000  # 1 s at 48 kHz -> 16 kHz
    assert 0.25 < np.abs(audio[2000:]).max() < 0.35  # the tone survives the resampler


def test_microphone_without_portaudio_is_a_clear_error(monkeypatch):
    import builtins

    from specscribe.pipeline import sources

    real_import = builtins.__import__

    def no_portaudio(name, *args, **kwargs):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_portaudio)
    with pytest.raises(AudioError, match="libportaudio2"):
        sources.list_input_devices()
