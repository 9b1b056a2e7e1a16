"""`specscribe live`'s loop (specscribe/commands/live.py _live) with a fake session and scheduler: a file read as fast
as possible is decoded as it goes (not all at once), and Ctrl-C keeps the audio captured during the last update."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest
from wavs import write_wav

import specscribe.commands.live as live
import specscribe.pipeline.scheduler as scheduler_module
import specscribe.pipeline.session as session_module
from specscribe.pipeline.sources import FileSource
from specscribe.pipeline.types import StreamOptions

RATE = 16_000


class FakeScheduler:
    def __init__(self, transcriber) -> None:
        pass

    async def close(self) -> None:
        pass


class FakeSession:
    """Counts the audio inserted before each process() call; process() takes `delay` seconds (one update)."""

    delay = 0.02
    interrupt_at: int | None = None  # Ctrl-C during this process() call (1-based)
    last: "FakeSession | None" = None

    def __init__(self, scheduler, options, session_id) -> None:
        self.batches: list[float] = []  # seconds of audio inserted before each process()
        self.inserted = 0.0
        self._since = 0.0
        self.at_finish = 0.0
        FakeSession.last = self

    def lookahead(self, chunk) -> bool:
        return False

    def insert_audio(self, chunk) -> None:
        self._since += chunk.size / RATE
        self.inserted += chunk.size / RATE

    async def process(self):
        self.batches.append(self._since)
        self._since = 0.0
        if self.interrupt_at == len(self.batches):
            os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(self.delay)
        return []

    async def finish(self):
        self.at_finish = self._since
        return []


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(session_module, "StreamSession", FakeSession)
    monkeypatch.setattr(scheduler_module, "ModelScheduler", FakeScheduler)
    monkeypatch.setattr(FakeSession, "interrupt_at", None)
    monkeypatch.setattr(FakeSession, "delay", 0.02)
    yield FakeSession


def tone_wav(path, seconds: float) -> None:
    write_wav(path, (0.1 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * RATE)) / RATE) * 32767).astype(np.int16))


def test_a_file_read_as_fast_as_possible_is_decoded_as_it_goes(fakes, tmp_path):
    """Each process() gets at most FILE_AHEAD seconds of audio, not the rest of the file at once."""
    path = tmp_path / "ten.wav"
    tone_wav(path, 10.0)
    source = FileSource(path, chunk=0.25, realtime=False)
    rc = asyncio.run(live._live(source, None, StreamOptions(update_interval=0.5), None, realtime=False))
    session = fakes.last
    assert rc == 0
    assert session.inserted == pytest.approx(10.0)
    assert max(session.batches) <= live.FILE_AHEAD + 0.25, session.batches  # was [0.25, 9.75]: all at the end
    assert len(session.batches) >= 10.0 / (live.FILE_AHEAD + 0.25)


def test_ctrl_c_stops_a_fast_file_within_a_few_seconds_of_audio(fakes, tmp_path):
    path = tmp_path / "ten.wav"
    tone_wav(path, 20.0)
    fakes.interrupt_at = 2
    source = FileSource(path, chunk=0.25, realtime=False)
    rc = asyncio.run(live._live(source, None, StreamOptions(update_interval=0.5), None, realtime=False))
    session = fakes.last
    assert rc == 0
    assert len(session.batches) <= 3, session.batches
    assert session.inserted <= 3 * live.FILE_AHEAD + 0.5  # not the whole file decoded before the stop
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is taken back


class Microphone:
    """A microphone: 0.05 s blocks in real time; counts what it captured."""

    def __init__(self) -> None:
        self.sent = 0.0
        self.closed = False

    async def __aiter__(self):
        while not self.closed:
            await asyncio.sleep(0.05)
            self.sent += 0.05
            yield np.zeros(int(0.05 * RATE), np.float32)

    async def close(self) -> None:
        self.closed = True


def test_ctrl_c_keeps_the_audio_captured_during_the_last_update(fakes):
    """The queue's audio (captured while the update ran) goes into the session before finish()."""
    fakes.delay = 0.3

    async def main():
        asyncio.get_running_loop().call_later(0.75, os.kill, os.getpid(), signal.SIGINT)
        mic = Microphone()
        rc = await live._live(mic, None, None, None, True)
        return rc, mic

    rc, mic = asyncio.run(main())
    session = fakes.last
    assert rc == 0
    assert mic.sent >= 0.7
    assert session.inserted == pytest.approx(mic.sent)  # was 0.3 s short: one update's worth dropped
    assert session.at_finish > 0  # given after the last process(), before finish()
