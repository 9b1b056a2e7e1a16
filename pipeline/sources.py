"""Audio sources: async iterators of float32 mono 16 kHz chunks.

- `FileSource`: any file PyAV reads, paced at real time (`realtime=True`) or as fast as possible.
- `MicrophoneSource`: a sounddevice input stream; its callback hands blocks to the event loop
  with `loop.call_soon_threadsafe` (no polling), resampled from the device's rate.
- `QueueSource`: chunks put by someone else (the WebSocket server), any rate and channel count.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Protocol

import numpy as np

from specscribe.pipeline.audio import SAMPLE_RATE, AudioError, load_audio
from specscribe.pipeline.resample import Resampler

_END = None  # queue sentinel


class AudioSource(Protocol):
    """Yields float32 mono SAMPLE_RATE chunks, shape (n,), until the audio ends or close() is called."""

    def __aiter__(self) -> AsyncIterator[np.ndarray]: ...

    async def close(self) -> None: ...


class FileSource:
    """A file cut into `chunk` second pieces; `realtime` yields each one when its audio has 'played'."""

    def __init__(self, path: str | Path, chunk: float = 0.25, realtime: bool = False) -> None:
        self.path = Path(path)
        self.chunk = chunk
        self.realtime = realtime
        self._closed = False
        try:
            self.audio = load_audio(self.path)  # (n,) float32 16 kHz mono
        except AudioError as exc:
            raise AudioError(f"{self.path}: {exc}") from None

    @property
    def duration(self) -> float:
        return self.audio.size / SAMPLE_RATE

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        loop = asyncio.get_running_loop()
        step = max(1, int(self.chunk * SAMPLE_RATE))
        t0 = loop.time()
        for i in range(0, self.audio.size, step):
            if self._closed:
                return
            if self.realtime:  # the chunk exists once its last sample has been 'spoken'
                delay = t0 + (i + step) / SAMPLE_RATE - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let other tasks (rendering, Ctrl-C) run
            yield self.audio[i : i + step]

    async def close(self) -> None:
        self._closed = True


class QueueSource:
    """Chunks pushed with `put(samples)` (interleaved PCM at `rate`/`channels`) and ended with `end()`."""

    def __init__(self, rate: int = SAMPLE_RATE, channels: int = 1, maxsize: int = 0) -> None:
        self._resampler = Resampler(rate, channels)
        self._queue: asyncio.Queue[np.ndarray | None] = asyncio.Queue(maxsize)
        self._ended = False

    async def put(self, samples: np.ndarray) -> None:
        if self._ended:
            raise RuntimeError("put() after end()")
        out = self._resampler.process(samples)
        if out.size:
            await self._queue.put(out)

    def put_nowait(self, samples: np.ndarray) -> None:
        if self._ended:
            raise RuntimeError("put() after end()")
        out = self._resampler.process(samples)
        if out.size:
            self._queue.put_nowait(out)

    def end(self) -> None:
        """No more audio: flush the resampler and stop the iteration after what is queued."""
        if not self._ended:
            self._ended = True
            tail = self._resampler.flush()
            if tail.size:
                self._queue.put_nowait(tail)
            self._queue.put_nowait(_END)

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        while (item := await self._queue.get()) is not _END:
            yield item

    async def close(self) -> None:
        self.end()


@dataclass(frozen=True)
class InputDevice:
    """Attributes: index, name, channels (max input channels), rate (default sample rate), default."""

    index: int
    name: str
    channels: int
    rate: int
    default: bool


def _sounddevice():
    try:
        import sounddevice
    except (ImportError, OSError) as exc:  # OSError: the PortAudio library is missing
        raise AudioError(f"microphone input needs sounddevice and PortAudio (apt-get install libportaudio2): {exc}") from None
    return sounddevice


def list_input_devices() -> list[InputDevice]:
    sd = _sounddevice()
    try:
        devices = sd.query_devices()
        default_in = sd.default.device[0]
    except sd.PortAudioError as exc:
        raise AudioError(f"cannot list audio devices: {exc}") from None
    return [
        InputDevice(i, d["name"], int(d["max_input_channels"]), int(d["default_samplerate"]), i == default_in)
        for i, d in enumerate(devices)
        if d["max_input_channels"] > 0
    ]


def resolve_device(spec: str | int | None) -> InputDevice:
    """A device index, or a case-insensitive part of its name; None: the default input."""
    devices = list_input_devices()
    if not devices:
        raise AudioError("no audio input device found")
    if spec is None or spec == "":
        return next((d for d in devices if d.default), devices[0])
    if isinstance(spec, int) or str(spec).isdigit():
        found = [d for d in devices if d.index == int(spec)]
    else:
        found = [d for d in devices if str(spec).lower() in d.name.lower()]
    if len(found) != 1:
        names = ", ".join(f"{d.index}: {d.name}" for d in devices)
        what = "no" if not found else "more than one"
        raise AudioError(f"{what} input device matches {spec!r} (inputs: {names})")
    return found[0]


class MicrophoneSource:
    """Captures from an input device; blocks go from PortAudio's thread to the loop via call_soon_threadsafe."""

    def __init__(self, device: str | int | None = None, block: float = 0.1) -> None:
        self.device = resolve_device(device)
        self.block = block
        self._queue: asyncio.Queue[np.ndarray | None] = asyncio.Queue()
        self._stream = None
        self._resampler = Resampler(self.device.rate, 1)
        self.overflows = 0

    async def __aiter__(self) -> AsyncIterator[np.ndarray]:
        sd = _sounddevice()
        loop = asyncio.get_running_loop()
        queue = self._queue

        def callback(indata, frames, time_info, status) -> None:  # PortAudio's thread
            if status.input_overflow:
                self.overflows += 1
            loop.call_soon_threadsafe(queue.put_nowait, indata[:, 0].copy())

        try:
            self._stream = sd.InputStream(
                device=self.device.index,
                channels=1,
                samplerate=self.device.rate,
                dtype="float32",
                blocksize=int(self.device.rate * self.block),
                callback=callback,
            )
            self._stream.start()
        except sd.PortAudioError as exc:
            raise AudioError(f"cannot open input device {self.device.name!r}: {exc}") from None
        try:
            while (item := await queue.get()) is not _END:
                out = self._resampler.process(item)
                if out.size:
                    yield out
            tail = self._resampler.flush()
            if tail.size:
                yield tail
        finally:
            self._stop()

    def _stop(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None

    async def close(self) -> None:
        self._stop()
        self._queue.put_nowait(_END)
