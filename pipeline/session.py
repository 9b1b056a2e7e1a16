"""A streaming session: ring buffer + VAD + streaming policy + the shared model scheduler.

Feed it audio with `insert_audio`, call `process()` whenever convenient (each call runs the VAD
over the new audio and, when `update_interval` seconds of speech have arrived, one decode
update), and `finish()` at the end. A caller that queues audio while process() runs shows each
chunk to `lookahead` as it arrives: if that audio ends the utterance, the update in flight is
recalled, so the utterance's final does not wait for it. Each session owns all its state; model work goes through
`ModelScheduler.run(session_id, job, priority)`: an utterance's last decode is FINAL, the updates
before it UPDATE, translations BACKGROUND. Under load (pipeline/load.py) updates come further apart,
translations wait for utterance ends and decodes drop the kept context; finals are never skipped. The
load is the scheduler's (many sessions waiting on the model), or this stream's own if higher
(`own_load`) for the update interval: the turnaround of its own decodes, so that a lone stream on a CPU too
slow for it updates less often instead of falling behind real time (the scheduler, idle between its
decodes, sees no lag).

One update: encode the uncommitted buffer once (plus `encoder_pad` seconds, not a 30 s window), decode it (committed text as the prompt, the
previous hypothesis as the speculative draft), align words, let the policy commit the words the
last two hypotheses agree on (`final` events) and show the rest (`partial`). Silence is never
decoded: without VAD speech the buffer is dropped. A speech end commits the utterance. With
`translate`, committed finals are translated a group at a time in the background (pipeline/translations.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Callable

import numpy as np

from specscribe.models.types import DecodeRequest
from specscribe.pipeline.alternatives import final_alternatives
from specscribe.pipeline.caption_events import CaptionEvents
from specscribe.pipeline.decode_window import choose_window
from specscribe.pipeline.audio import SAMPLE_RATE, clean_samples
from specscribe.pipeline.language import LanguageOptions, LanguageTracker
from specscribe.pipeline.lookahead import Lookahead
from specscribe.pipeline.pending_audio import PendingAudio
from specscribe.pipeline.policy import LocalAgreement, LocalAgreementOptions, StreamingPolicy
from specscribe.pipeline.ring_buffer import RingBuffer
from specscribe.pipeline.scheduler import WITHDRAWN, ModelScheduler, Priority
from specscribe.pipeline.stream_jobs import DecodeFixes, Hypothesis, max_tokens_for, transcribe_job
from specscribe.pipeline.stream_stats import StreamStats
from specscribe.pipeline.translations import Translations
from specscribe.pipeline.types import CaptionEvent, StreamOptions
from specscribe.pipeline.vad import NoVad, SileroVad, VadEvent, VadOptions

MIN_WINDOW = 1.0  # seconds: shorter windows are not decoded (Whisper guesses on them)
MIN_WINDOW_SPEECH = 0.25  # seconds of VAD speech a window needs to be decoded (else it is silence)
CONTEXT_GAP = 2.0  # seconds of silence after which the last utterance's audio stops being context

log = logging.getLogger(__name__)  # DEBUG (`serve --log-level debug`, `-v`): every decode's window, words and commits


def _timed(words) -> str:
    """Words as text@start-end, for the debug log."""
    return "|".join(f"{w.text.strip()}@{w.start:.2f}-{w.end:.2f}" for w in words)


def policy_options(options: StreamOptions) -> LocalAgreementOptions:
    """The commit policy's options a stream's options give."""
    return LocalAgreementOptions(options.trim_after, options.max_buffer, keep_context=options.keep_context,
                                 agree_gap=options.agree_gap, settle_after=options.settle_after,
                                 pause_probability=options.pause_probability)


class StreamSession:
    """One stream's captioning state. Not thread-safe: use it from one event loop."""

    def __init__(
        self,
        scheduler: ModelScheduler,
        options: StreamOptions,
        session_id: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        vad: SileroVad | None = None,
        policy: StreamingPolicy | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.options = options
        self.session_id = session_id
        self._clock = clock
        self._t0 = clock()
        if vad is None:
            vad_opts = VadOptions(options.vad_threshold, None, options.min_speech, options.min_silence)
            vad = SileroVad(vad_opts) if options.vad else NoVad()
        self._vad = vad
        self._ahead = Lookahead(vad)  # hears the audio that waits while a job runs (lookahead)
        self._policy = policy or LocalAgreement(policy_options(options))
        self._figures = StreamStats(scheduler.options.load)  # totals, and this stream's own load (own_load)
        self._ring = RingBuffer(int((options.max_buffer + 20.0) * SAMPLE_RATE))
        self._pending = PendingAudio()
        self._updating = False  # an UPDATE job is in flight
        self._lock = asyncio.Lock()
        self._pad = int(options.speech_pad * SAMPLE_RATE)
        self._in_speech = False
        self._speech_end = -(10**12)  # ring offset where the last utterance ended
        self._last_update = 0  # ring offset of the last decode update
        self._decoded_to = -1  # ring offset where the last decoded audio ended
        self._paused = False  # this utterance's pause (options.pause_commit) was committed
        # the language: given, or tracked over the stream's decodes (pipeline/language.py)
        self._tracker = None if options.language else LanguageTracker(LanguageOptions(allowed=options.languages))
        self._utterance_start = 0  # ring offset where the current utterance began
        self._draft_tokens: tuple[int, ...] = ()
        self._draft_text: str | None = None
        self._heard_in: str | None = None  # the language of the decode the partial came from
        self._translations = None  # committed finals, translated a group at a time (pipeline/translations.py)
        if options.translate and options.task == "transcribe":
            self._translations = Translations(scheduler, session_id, options.encoder_pad, options.draft, self._event,
                                              functools.partial(self._figures.account, counter="translations"))
        self._captions = CaptionEvents(options.lines, options.interim_results, self._event,
                                       self._translations.add if self._translations is not None else None)
        self._model_s0 = scheduler.model_seconds(session_id)  # a connection's sessions share its id
        self._finished = False

    # ---- public API ----
    def insert_audio(self, samples: np.ndarray) -> None:
        """samples: float32 mono 16 kHz, shape (n,), any n."""
        if self._finished:
            raise RuntimeError("insert_audio() after finish()")
        x = clean_samples(samples)
        if x.size:
            self._pending.put(x)
            self._ahead.inserted(x.size)

    def lookahead(self, samples: np.ndarray) -> bool:
        """Audio that has arrived and will be inserted later: show every chunk, in order, as it arrives. If it
        ends the utterance while an update is in flight, the update is recalled, running or waiting (its final
        then does not wait for it; pipeline/lookahead.py, scheduler.py withdraw). True if it was recalled."""
        if not (self._ahead.hears_end(clean_samples(samples), self._pending, start=self._updating) and self._updating):
            return False
        self.scheduler.withdraw(self.session_id, Priority.UPDATE, running=True)
        return True

    def withdraw_update(self) -> bool:
        """Take back this stream's update if it has not started (pipeline/scheduler.py withdraw): call it when
        newer audio waits to be processed. That audio may end the utterance, and its final should not wait
        behind a stale update; otherwise the next update comes when due. True if one was taken back."""
        return self.scheduler.withdraw(self.session_id, Priority.UPDATE) > 0

    @property
    def pending_seconds(self) -> float:
        return self._pending.samples / SAMPLE_RATE

    @property
    def language(self) -> str | None:
        """The stream's language: given, or the tracker's current choice (None before any evidence)."""
        return self.options.language if self._tracker is None else self._tracker.state.language

    async def process(self) -> list[CaptionEvent]:
        """Run the VAD over new audio and, when due, one decode update. Returns the events."""
        async with self._lock:
            return await self._process()

    async def finish(self) -> list[CaptionEvent]:
        """End of stream: commit everything, translate what is left, and emit the stats."""
        async with self._lock:
            if self._finished:
                return []
            events = await self._process()
            for ev in self._vad.flush():
                events += await self._on_vad(ev)
            if self._in_speech:  # StreamOptions.vad=False, or a VAD that stays open
                events += await self._end_utterance(self._ring.end, reset=True)
            events += await self._release_held()
            self._translate(force=True)
            if self._translations is not None:
                events += await self._translations.drain()
            self._finished = True
            events.append(self._event("stats", stats=self.stats()))
            return events

    def stats(self) -> dict:
        """SpecStats totals plus stream figures (audio and compute seconds, real-time factor)."""
        compute_s = self.scheduler.model_seconds(self.session_id) - self._model_s0
        return self._figures.to_dict(self._ring.end / SAMPLE_RATE, compute_s, self._captions.finals)

    # ---- internals ----
    def _event(self, type_: str, **fields) -> CaptionEvent:
        return CaptionEvent(type=type_, emitted_at=self._clock() - self._t0, **fields)

    async def _process(self) -> list[CaptionEvent]:
        events: list[CaptionEvent] = []
        while self._pending:
            # Slices keep the decoded span under max_buffer even when much audio waits.
            room = self.options.max_buffer - (self._ring.end / SAMPLE_RATE - self._policy.window()[0])
            limit = int(min(max(room, 1.0), 10.0) * SAMPLE_RATE) if self._in_speech else int(10.0 * SAMPLE_RATE)
            chunk = self._pending.take(limit)
            self._ring.append(chunk)
            vad_events = self._vad.process(chunk)
            self._ahead.heard()
            for ev in vad_events:
                events += await self._on_vad(ev)
            if self._in_speech:
                self._policy.insert_audio(self._ring.end / SAMPLE_RATE)
                # under load, updates come further apart (pipeline/load.py)
                interval = self.options.update_interval * self._update_factor
                due = self._ring.end - self._last_update >= interval * SAMPLE_RATE
                if self._pause_due():  # commit as at the utterance's end, before the VAD ends it
                    self._paused = True
                    events += await self._update(final=True, end=self._ring.end, reset=False)
                # a pause inside an utterance adds nothing to decode: wait for speech (or its end)
                elif due and self._vad.speech_seconds(self._last_update, self._ring.end) > 0:
                    events += await self._update(final=False, end=self._ring.end)
            elif self._ring.end - self._speech_end > CONTEXT_GAP * SAMPLE_RATE:
                events += await self._release_held()  # the pause became an end
                self._policy.skip(self._reach_back() / SAMPLE_RATE)  # long silence: no context kept
            elif not self._policy.partial:  # a pause with nothing held back: the line may end
                events += self._captions.idle(self._ring.end / SAMPLE_RATE)
            self._trim_ring()
        return events + (self._translations.collect() if self._translations is not None else [])

    @property
    def _update_factor(self) -> int:
        """update_interval is multiplied by this: by the scheduler's load level, or by this stream's own if higher
        (options.own_load; pipeline/load.py). Only the interval: the kept context (what Whisper hears a short turn
        with) and the held unsure words follow the scheduler's load alone (docs/benchmarks.md, AVX2 EPYC)."""
        own = self._figures.lag.load().update_factor if self.options.own_load else 1
        return max(self.scheduler.load.update_factor, own)

    def _pause_due(self) -> bool:
        """options.pause_commit seconds of silence after this utterance's speech, not yet committed."""
        pause = self.options.pause_commit
        if pause is None or self._vad.silence_seconds < pause:
            self._paused = self._paused and self._vad.silence_seconds > 0  # speech again: a new pause may come
            return False
        return not self._paused

    def _reach_back(self) -> int:
        """The earliest offset a speech start found in the next audio may need."""
        return self._ring.end - self._pad - int((self.options.min_speech + 0.5) * SAMPLE_RATE)

    def _trim_ring(self) -> None:
        keep = int(self._policy.window()[0] * SAMPLE_RATE) - self._pad
        if not self._in_speech:
            keep = min(keep, self._reach_back())
        needed = self._translations.needed_from if self._translations is not None else None
        if needed is not None:
            keep = min(keep, int(needed * SAMPLE_RATE) - self._pad)
        self._ring.trim(keep)

    async def _on_vad(self, ev: VadEvent) -> list[CaptionEvent]:
        if ev.kind == "start" and not self._in_speech:
            start = max(ev.offset - self._pad, self._ring.start)
            events = []
            if start - self._speech_end > CONTEXT_GAP * SAMPLE_RATE:  # after a long pause: a new utterance
                events = await self._release_held()
                self._policy.skip(start / SAMPLE_RATE)
                self._figures.lag.reset()  # its decodes start short again, without the context the lag was measured with
            if self._tracker is not None:
                self._tracker.new_utterance()  # its language is checked afresh
            self._utterance_start = start
            self._in_speech = True
            self._policy.insert_audio(self._ring.end / SAMPLE_RATE)
            self._last_update = start
            return events + [self._event("speech_start", start=ev.offset / SAMPLE_RATE)]
        if ev.kind == "end" and self._in_speech:
            events = await self._end_utterance(min(ev.offset + self._pad, self._ring.end), reset=False)
            events.append(self._event("speech_end", end=ev.offset / SAMPLE_RATE))
            return events
        return []

    async def _end_utterance(self, end: int, reset: bool) -> list[CaptionEvent]:
        """A speech end (reset False: a pause, its unsure words wait; see policy.pause) or the stream's end."""
        self._policy.insert_audio(end / SAMPLE_RATE)
        events = await self._update(final=True, end=end, reset=reset)
        self._in_speech = False
        self._speech_end = end
        self._translate(force=not self._policy.partial)  # words held over the pause join the group when final
        return events

    async def _release_held(self) -> list[CaptionEvent]:
        """Commit the unsure words a pause held back (no speech came to decide them); the open line ends."""
        if self._in_speech:
            return []
        events = []
        if self._policy.partial:
            events = self._emit(self._policy.finish(self._policy.partial, reset=False), self._speech_end)
        self._translate(force=True)
        return events + self._captions.flush()

    def _decode_language(self) -> str | None:
        return self.options.language or (self._tracker.decode_language if self._tracker else None)

    def _request(self, seconds: float) -> DecodeRequest:
        return DecodeRequest(
            task=self.options.task,
            language=self._decode_language(),
            timestamps=False,
            max_new_tokens=max_tokens_for(seconds),
            hypothesis_tokens=self._draft_tokens if self.options.draft else (),
            beam_size=self.options.beam_size,
            n_best=self.options.n_best,
            hotwords=self.options.hotwords,
        )

    async def _update(self, final: bool, end: int, reset: bool = True) -> list[CaptionEvent]:
        window = choose_window(self._policy, self._captions, self._tracker, self._decode_language(),
                               self._utterance_start / SAMPLE_RATE, self.scheduler.load.keep_context,
                               self.options.detect_apart)  # pipeline/decode_window.py
        start_s, prompt = window.start, window.prompt
        start = max(int(round(start_s * SAMPLE_RATE)), self._ring.start)
        self._last_update = end
        hyp: Hypothesis | None = None
        heard: list[CaptionEvent] = []  # a `language` event, when the tracker's view changed
        if (not final and end - start < MIN_WINDOW * SAMPLE_RATE) or end - start < int(0.1 * SAMPLE_RATE):
            update = self._end((), reset) if final else None  # too short to decode
        elif self._vad.speech_seconds(start, end) < MIN_WINDOW_SPEECH:
            # silence only (e.g. the pause after a committed sentence): decoding it would only
            # echo the prompt back, so it is not decoded at all
            update = self._end((), reset) if final else None
        elif final and self._decoded_to > start and self._vad.speech_seconds(min(self._decoded_to, end), end) == 0:
            # no speech since the last decode (a pause commit, or an update past the speech's end): its
            # hypothesis heard all of this utterance, so it is the last one; decoding again adds silence only
            update = self._end(self._policy.partial, reset)
        else:
            audio = self._ring.read(start, end)  # (end - start,)
            seconds = audio.size / SAMPLE_RATE
            draft_text = self._draft_text if self.options.draft else None
            detect = self._tracker is not None and self._tracker.needs_detection
            o = self.options
            fixes = DecodeFixes(o.retry_loops, o.continue_skipped, o.speech_onsets)
            frames = self._vad.speech_frames(start, end) if o.continue_skipped or o.speech_onsets else None
            speech = None if frames is None else (frames - start) / SAMPLE_RATE  # (m,) seconds into the window
            pad = self.scheduler.load.encoder_pad(o.encoder_pad, o.loaded_encoder_pad)  # shorter under load
            job = transcribe_job(audio, start / SAMPLE_RATE, self._request(seconds), prompt, draft_text,
                                 pad, detect, o.languages, speech,
                                 max(window.detect_from - start / SAMPLE_RATE, 0.0), fixes)
            priority = Priority.FINAL if final else Priority.UPDATE
            self._updating = not final
            submitted = self._clock()
            try:
                hyp = await self.scheduler.run(self.session_id, job, priority)
            finally:
                self._updating = False
            if hyp is WITHDRAWN:  # an update taken back (withdraw_update, lookahead): no news
                self._figures.count("withdrawn")
                return []
            self._figures.decoded(hyp, self._clock() - submitted)
            self._decoded_to = end
            if hyp.language_probs and self._tracker is not None:
                heard = self._observe_language(hyp.language_probs, max(start, self._utterance_start), end)
            if final and not hyp.words:
                # the utterance's last decode failed the guards (a repetition loop, say) or came
                # back empty: commit the last good hypothesis' tail rather than drop the utterance
                update = self._end(self._policy.partial, reset)
            elif hyp.rejected:
                update = None  # no information: keep the last good hypothesis (and its partial)
            else:
                update = self._end(hyp.words, reset) if final else self._policy.process(hyp.words)
                self._heard_in = hyp.language
                self._set_draft(hyp, start_s, update.buffer_start)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s %s [%.2f, %.2f) prompt=%r words=%s committed=%s partial=%s", self.session_id,
                      "final" if final else "update", start / SAMPLE_RATE, end / SAMPLE_RATE, prompt[-40:],
                      _timed(hyp.words if hyp is not None else ()), _timed(update.committed if update else ()),
                      _timed(update.partial if update else ()))
        if update is None:
            return heard
        alternatives = None  # a final's n-best texts, from its span of this decode's hypotheses
        if hyp is not None and self.options.n_best > 1:
            alternatives = functools.partial(final_alternatives, hyp.words, hyp.alternatives, limit=self.options.n_best)
        events = heard + self._emit(update, end, alternatives, hyp.language if hyp else None)
        if not final:
            self._translate(force=False)
        return events

    def _observe_language(self, probs: dict[str, float], start: int, end: int) -> list[CaptionEvent]:
        """Weigh a detection over this utterance's speech in [start, end); a `language` event if the view changed."""
        before = self._tracker.state
        state = self._tracker.observe(probs, self._vad.speech_seconds(start, end))
        if (state.language, state.locked) == (before.language, before.locked):
            return []
        if not state.locked and state.probability < 0.5:  # a doubtful early guess: not worth a flicker on the page
            return []
        return [self._event("language", language=state.language, probability=state.probability, locked=state.locked)]

    def _end(self, words, reset: bool):
        """An utterance's last hypothesis: all of it final at the stream's end, up to its unsure words at a pause."""
        if reset or not self.options.hold_unsure or not self.scheduler.load.hold_unsure:
            return self._policy.finish(words, reset)
        return self._policy.pause(words)

    def _emit(self, update, end: int, alternatives: Callable | None = None, language: str | None = None) -> list[CaptionEvent]:
        """The final, line and partial events of a policy update (end: the decoded audio's end, ring offset).
        language: the decode's; None where words are committed without one (the partial: its decode's)."""
        return self._captions.emit(update, end / SAMPLE_RATE, language or self._heard_in or self.language, alternatives)

    def _set_draft(self, hyp: Hypothesis, window_start: float, buffer_start: float) -> None:
        """The next decode's previous-hypothesis draft: the tokens, or the text after a moved start."""
        if buffer_start <= window_start + 1e-6:
            self._draft_tokens, self._draft_text = hyp.tokens, None
        else:
            self._draft_tokens = ()
            self._draft_text = "".join(w.text for w in hyp.words if w.start >= buffer_start - 0.02)

    def _translate(self, force: bool) -> None:
        """Start translating the finals grouped so far, when due (pipeline/translations.py); its event comes
        back from a later process() or from finish()."""
        if self._translations is not None:
            nxt = self._policy.partial[0].start if self._policy.partial else float("inf")
            self._translations.start(force, self._ring, self.language, nxt)
