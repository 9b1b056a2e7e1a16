"""A streaming session's translations: committed finals grouped and translated in order, in the background.

Finals are grouped up to a sentence end (only at load level 0, pipeline/load.py), an utterance end or
TRANSLATE_MAX_SPAN seconds, and the group's span of audio is decoded with Whisper's translate task at
BACKGROUND priority, beside the session's next updates (their decodes can share passes). For English speech the
group's transcript is the decode's previous-hypothesis draft: English "translated" to English is nearly its
transcript, and the target verifies it. Each `translation` event carries the id of the last final of its group
(it covers every final after the previous translation). One instance per session, used from its event loop.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from specscribe.models.types import DecodeRequest, SpecStats, Word
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.policy import ends_sentence
from specscribe.pipeline.ring_buffer import RingBuffer
from specscribe.pipeline.scheduler import ModelScheduler, Priority
from specscribe.pipeline.stream_jobs import max_tokens_for, translate_job
from specscribe.pipeline.types import CaptionEvent

TRANSLATE_MAX_SPAN = 10.0  # seconds of finals translated together at most
TRANSLATE_TAIL = 0.5  # seconds of audio after a group's last word (DTW ends a word before its last sound)


class Translations:
    """The finals waiting for translation, the translation in flight and the events not yet returned.

    event: makes a CaptionEvent (the session's clock); account: adds a translation's SpecStats to the session's.
    """

    def __init__(self, scheduler: ModelScheduler, session_id: str, encoder_pad: float, draft: bool,
                 event: Callable[..., CaptionEvent], account: Callable[[SpecStats], None]) -> None:
        self.scheduler, self.session_id = scheduler, session_id
        self._encoder_pad, self._draft = encoder_pad, draft
        self._event, self._account = event, account
        self._group: list[tuple[int, tuple[Word, ...], str | None]] = []  # (final id, words, language) waiting
        self._last_text = ""  # the previous translation: the next one's prompt
        self._running: asyncio.Task | None = None  # the newest translation; each awaits the one before
        self._done: list[CaptionEvent] = []  # translation events not yet returned
        self._until = 0.0  # seconds: the end of the last translated final

    def add(self, final_id: int, words: tuple[Word, ...], language: str | None = None) -> None:
        """A final (its id, words, and the language it was decoded in: None, the stream's) joins the group."""
        self._group.append((final_id, words, language))

    @property
    def needed_from(self) -> float | None:
        """Seconds: the earliest audio a waiting group still needs (None: none waits)."""
        return self._group[0][1][0].start if self._group else None

    def start(self, force: bool, ring: RingBuffer, language: str | None, next_start: float) -> None:
        """Start translating the group, when due (force: an utterance or the stream ended). language: the stream's,
        for finals added without one. next_start: seconds where the next uncommitted word starts (inf: none); the
        span stops before it. A group holds one language: where its finals change language, the run before the
        change is due, and is translated from its own language."""
        if not self._group:
            return
        source = self._group[0][2] or language
        cut = next((i for i, g in enumerate(self._group) if (g[2] or language) != source), len(self._group))
        group, rest = self._group[:cut], self._group[cut:]
        if rest:
            force, next_start = True, min(next_start, rest[0][1][0].start)
        first, last = group[0][1][0], group[-1][1][-1]
        sentence_end = ends_sentence(last.text) and self.scheduler.load.translate_early
        if not (force or sentence_end or last.end - first.start > TRANSLATE_MAX_SPAN):
            return
        self._group = rest
        language = source
        # pad the span, but not into the neighbouring words (the last translated, the next partial), and never
        # cut the group's own words (DTW times of neighbours can overlap by a few hundredths)
        start = max(int(max(first.start - 0.1, min(self._until, first.start)) * SAMPLE_RATE), ring.start)
        end = min(int(max(min(last.end + TRANSLATE_TAIL, next_start), last.end) * SAMPLE_RATE), ring.end)
        self._until = last.end
        if end - start > 30 * SAMPLE_RATE:
            start = end - 30 * SAMPLE_RATE
        request = DecodeRequest(task="translate", language=language, timestamps=False,
                                max_new_tokens=max_tokens_for((end - start) / SAMPLE_RATE))
        draft = "".join(w.text for _, words, _ in group for w in words) if language == "en" and self._draft else ""
        audio, before = ring.read(start, end), self._running

        async def translate() -> None:
            if before is not None:
                await before  # in order: each translation's prompt is the previous one's text
            job = translate_job(audio, request, self._last_text[-200:], self._encoder_pad, draft)
            tr = await self.scheduler.run(self.session_id, job, Priority.BACKGROUND)
            self._account(tr.stats)
            if tr.text:
                self._last_text = tr.text
                self._done.append(self._event("translation", id=group[-1][0], start=first.start, end=last.end,
                                              text=tr.text))

        self._running = asyncio.ensure_future(translate())

    def collect(self) -> list[CaptionEvent]:
        """Translation events finished since the last call (a failed translation raises here)."""
        task = self._running
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()
        events, self._done = self._done, []
        return events

    async def drain(self) -> list[CaptionEvent]:
        """Wait for the translation in flight; every event not yet returned."""
        if self._running is not None:
            await self._running
        return self.collect()
