"""A fake transcriber and streaming session for the server tests (no weights, deterministic).

Test audio is a sequence of "words": blocks of constant amplitude 0.1 ... 0.9 (word "w1" ... "w9"),
separated by silence. The fake session runs a level "VAD" over 20 ms frames; a run of >= 3 frames at
one level is a word, and 0.3 s of silence ends an utterance (a final). The recognition of each run
goes through the ModelScheduler to the fake transcriber, like real model work.
"""

from __future__ import annotations

import asyncio
import weakref

import numpy as np

from specscribe.pipeline.types import CaptionEvent, StreamOptions, Word

RATE = 16_000
FRAME = 320  # 20 ms


class FakeTranscriber:
    name = "fake"
    model_name = "fake-model"
    is_multilingual = True

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def word_for(self, level: int) -> str:
        self.calls += 1
        if self.delay:
            import time

            time.sleep(self.delay)  # simulated model time, on the model thread
        return f"w{level}"


def utterance(levels: list[int], word_s: float = 0.25, gap_s: float = 0.5, rate: int = RATE) -> np.ndarray:
    """float32 mono audio: one block per level (0.1 * level amplitude), then gap_s of silence."""
    parts = [np.full(int(word_s * rate), 0.1 * lv, dtype=np.float32) for lv in levels]
    parts.append(np.zeros(int(gap_s * rate), dtype=np.float32))
    return np.concatenate(parts)


def to_pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


class FakeSession:
    """Implements the CaptionSession contract of web/listen.py. `live` tracks instances (leak checks)."""

    live: "weakref.WeakSet[FakeSession]" = weakref.WeakSet()

    def __init__(self, scheduler, options: StreamOptions, session_id: str, *, pad_partials: int = 0) -> None:
        self.scheduler, self.options, self.session_id = scheduler, options, session_id
        self.pad_partials = pad_partials
        self._pending: list[np.ndarray] = []
        self._carry = np.zeros(0, dtype=np.float32)
        self._n = 0  # frames consumed
        self._in_speech = False
        self._silence = 0
        self._run_level, self._run_len, self._run_start = 0, 0, 0
        self._words: list[Word] = []
        self._final_id = 0
        self._finished = False
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        FakeSession.live.add(self)

    def insert_audio(self, samples: np.ndarray) -> None:
        if self._finished:
            raise RuntimeError("insert_audio() after finish()")
        self._pending.append(np.asarray(samples, dtype=np.float32))

    @property
    def pending_seconds(self) -> float:
        return sum(p.size for p in self._pending) / RATE

    withdrawals = 0  # withdraw_update calls, all instances

    def withdraw_update(self) -> bool:
        FakeSession.withdrawals += 1
        return False  # its model jobs are finals only

    looked_ahead = 0  # samples shown to lookahead, all instances

    def lookahead(self, samples: np.ndarray) -> bool:
        FakeSession.looked_ahead += len(samples)
        return False

    def _ev(self, type_: str, **kw) -> CaptionEvent:
        return CaptionEvent(type=type_, emitted_at=self._loop.time() - self._t0, **kw)

    async def process(self) -> list[CaptionEvent]:
        x = np.concatenate([self._carry, *self._pending]) if self._pending else self._carry
        self._pending = []
        usable = x.size - x.size % FRAME
        self._carry = x[usable:]
        events: list[CaptionEvent] = []
        for frame in x[:usable].reshape(-1, FRAME):
            level = int(round(float(np.abs(frame).mean()) * 10))
            t = self._n * FRAME / RATE
            self._n += 1
            if level > 0:
                if not self._in_speech:
                    self._in_speech = True
                    events.append(self._ev("speech_start", start=t))
                self._silence = 0
                if level == self._run_level:
                    self._run_len += 1
                else:
                    await self._close_run()
                    self._run_level, self._run_len, self._run_start = level, 1, self._n - 1
            elif self._in_speech:
                await self._close_run()
                self._run_level = self._run_len = 0
                self._silence += 1
                if self._silence * FRAME >= 0.3 * RATE:
                    events += await self._commit()
                    self._in_speech = False
                    events.append(self._ev("speech_end", end=t))
            if self._run_len == 3 and self.options.interim_results:
                text = " ".join(w.text for w in self._words) + f" w{level}"
                events.append(self._ev("partial", start=t, end=t, text=text.strip() + " " + "x" * self.pad_partials))
        return events

    async def _close_run(self) -> None:
        if self._run_len >= 3:
            level = self._run_level
            text = await self.scheduler.run(self.session_id, lambda tr: tr.word_for(level))
            start, end = self._run_start * FRAME / RATE, (self._run_start + self._run_len) * FRAME / RATE
            self._words.append(Word(start, end, text))
        self._run_len = 0

    async def _commit(self) -> list[CaptionEvent]:
        await self._close_run()
        if not self._words:
            return []
        words, self._words = tuple(self._words), []
        text = " ".join(w.text for w in words)
        fid = self._final_id
        self._final_id += 1
        events = [self._ev("final", id=fid, start=words[0].start, end=words[-1].end, text=text, words=words),
                  self._ev("line", id=fid, start=words[0].start, end=words[-1].end, text=text)]  # a line per utterance
        if self.options.translate:
            events.append(self._ev("translation", id=fid, start=words[0].start, end=words[-1].end, text=text.upper()))
        return events

    async def finish(self) -> list[CaptionEvent]:
        if self._finished:
            return []
        events = await self.process()
        if self._in_speech:
            events += await self._commit()
            events.append(self._ev("speech_end", end=self._n * FRAME / RATE))
        self._finished = True
        events.append(self._ev("stats", stats={"finals": self._final_id}))
        return events


from specscribe.web.server import BackgroundServer as ServerThread  # noqa: E402,F401  (re-export for the tests)
