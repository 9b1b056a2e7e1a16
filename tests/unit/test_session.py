"""StreamSession with a scripted fake Transcriber and a scripted VAD: no weights.

The fake knows the whole stream (seeded noise, so any window's offset can be found by value) and a
script of words with absolute times. A decode of a window returns the script's words that lie in
it; a word cut by the window's end comes out garbled (as Whisper's last word often does), so the
policy must wait for agreement before committing it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging

import numpy as np
import pytest

from specscribe.models.types import Alternative, DecodeRequest, EncodedAudio, Segment, SpecStats, WindowResult, Word
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.load import Load
from specscribe.pipeline.scheduler import WITHDRAWN, ModelScheduler, Priority
from specscribe.pipeline.session import StreamSession, policy_options
from specscribe.pipeline.types import StreamOptions
from specscribe.pipeline.vad import VadEvent

SR = SAMPLE_RATE


class FakeTranscriber:
    name = "fake"
    model_name = "fake"
    is_multilingual = True

    def __init__(self, stream: np.ndarray, script: list[tuple[str, float, float]], no_speech: bool = False, repeat_after: float = 1e9):
        self.stream = stream
        self.script = script
        self.no_speech = no_speech
        self.repeat_after = repeat_after  # windows at least this long come back as a repetition loop
        self.loops_with_timestamps = True  # ... also when decoded with timestamp tokens
        self.loops_without_prompt = True  # ... also when decoded without a prompt
        self.vocab: dict[str, int] = {}
        self.encode_calls = 0
        self.encoder_windows: list[float | None] = []
        self.decode_calls = 0
        self.requests: list[DecodeRequest] = []
        self.windows: list[tuple[float, float]] = []  # (offset, duration) of every encode
        self.decoded: list[tuple[float, float]] = []  # (offset, duration) of every decode's encoded audio
        self.returned_stats: list[SpecStats] = []  # the stats of every decode, in order
        # {word: (heard, until)}: a window that ends before `until` hears the word as `heard`, unsure
        self.doubt: dict[str, tuple[str, float]] = {}
        self.heard = lambda offset, duration: {"en": 1.0}  # the language detector, by window
        self.detections: list[tuple[float, float]] = []
        self.stops_after: set[str] = set()  # a decode ends after these words (Whisper stopping early)

    def _offset(self, audio: np.ndarray) -> int:
        for i in np.flatnonzero(self.stream == audio[0]):
            if np.array_equal(self.stream[i : i + 16], audio[:16]):
                return int(i)
        raise AssertionError("window not found in the stream")

    def encode(self, audio: np.ndarray, window: float | None = None) -> EncodedAudio:
        assert audio.dtype == np.float32 and audio.ndim == 1 and audio.size <= 30 * SR
        self.encode_calls += 1
        self.encoder_windows.append(window)
        off = self._offset(audio) / SR
        self.windows.append((off, audio.size / SR))
        return EncodedAudio(duration=audio.size / SR, handle=(off, audio.size / SR))

    def detect_language(self, encoded):
        return "en", 1.0

    def language_probabilities(self, encoded, top=10):
        self.detections.append(encoded.handle)
        return self.heard(*encoded.handle)

    def _tok(self, word: str) -> int:
        return self.vocab.setdefault(word, len(self.vocab) + 1)

    def decode(self, encoded: EncodedAudio, request: DecodeRequest) -> WindowResult:
        self.decode_calls += 1
        self.requests.append(request)
        self.decoded.append(encoded.handle)
        off, dur = encoded.handle
        words = []
        for text, start, end in self.script:
            if start < off - 0.05 or start >= off + dur:
                continue
            if end > off + dur:  # cut by the window end: unstable
                text = text[:2] + "~"
                end = off + dur
            probability = 1.0
            if text in self.doubt and off + dur < self.doubt[text][1]:
                text, probability = self.doubt[text][0], 0.3
            if request.task == "translate":
                text = text.upper()
            words.append(Word(start - off, end - off, " " + text, probability))
        stop = next((i for i, w in enumerate(words) if w.text.strip() in self.stops_after), None)
        words = words if stop is None else words[: stop + 1]
        loops = (self.loops_with_timestamps or not request.timestamps) and (
            self.loops_without_prompt or bool(request.prompt_tokens))
        if dur >= self.repeat_after and words and loops:
            words = [Word(words[0].start, dur, " la" * 40)]  # fails the compression-ratio guard
        tokens = tuple(self._tok(w.text) for w in words)
        stats = SpecStats(target_passes=max(1, len(tokens) // 2), tokens=len(tokens) + 1, drafted=len(tokens),
                          accepted=len(tokens) // 2)
        self.returned_stats.append(stats)
        seg = Segment(0.0, dur, "".join(w.text for w in words), tokens, tuple(words))
        alternatives = ()
        if request.n_best > 1:  # the runner-up hears every third word with an "x"
            other = "".join(w.text + ("x" if i % 3 == 1 else "") for i, w in enumerate(words))
            alternatives = (Alternative(seg.text, tokens, -0.2), Alternative(other, (), -0.3))
        return WindowResult(
            tokens=tokens,
            text=seg.text,
            segments=(seg,) if words else (),
            language=request.language or "en",
            avg_logprob=-1.5 if self.no_speech else -0.2,
            no_speech_prob=0.9 if self.no_speech else 0.01,
            stats=stats,
            alternatives=alternatives,
        )

    def align_words(self, encoded, result):
        return result.segments

    def encode_text(self, text: str) -> tuple[int, ...]:
        return tuple(self._tok(" " + w) for w in text.split())

    def decode_tokens(self, tokens):
        inv = {v: k for k, v in self.vocab.items()}
        return "".join(inv[t] for t in tokens)


class ScriptedVad:
    """Speech exactly in the given (start, end) second intervals; ends reported after min_silence."""

    def __init__(self, intervals: list[tuple[float, float]], min_silence: float = 0.6):
        self.intervals = [(int(a * SR), int(b * SR)) for a, b in intervals]
        self.min_silence = int(min_silence * SR)
        self.offset = 0
        self.in_speech = False
        self._i = 0

    def process(self, samples):
        self.offset += len(samples)
        events = []
        while self._i < len(self.intervals):
            a, b = self.intervals[self._i]
            if not self.in_speech and self.offset > a + 0.1 * SR:
                self.in_speech = True
                events.append(VadEvent("start", a))
            if self.in_speech and self.offset >= b + self.min_silence:
                self.in_speech = False
                events.append(VadEvent("end", b))
                self._i += 1
                continue
            break
        return events

    def speech_seconds(self, start, end):
        return sum(max(0, min(b, end) - max(a, start)) for a, b in self.intervals) / SR

    def speech_frames(self, start, end):
        frames = [o for a, b in self.intervals for o in range(a, b, 512)]
        return np.array([o for o in frames if start <= o < end], dtype=np.int64)

    @property
    def silence_seconds(self):
        """Seconds since the open interval's speech ended (0 outside speech or during it)."""
        if not self.in_speech:
            return 0.0
        return max(0, self.offset - self.intervals[self._i][1]) / SR

    def flush(self):
        if self.in_speech:
            self.in_speech = False
            return [VadEvent("end", self.offset)]
        return []

    def fork(self):
        return copy.copy(self)  # its state is scalars; the intervals are shared and never change


def make_script(n_words: int, start: float = 0.5, word: float = 0.35, gap: float = 0.1, sentence_every: int = 0):
    script, t = [], start
    for i in range(n_words):
        text = f"w{i}"
        if sentence_every and (i + 1) % sentence_every == 0:
            text += "."
        script.append((text, round(t, 3), round(t + word, 3)))
        t += word + gap
    return script


def noise(seconds: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(seconds * SR)) * 0.01).astype(np.float32)


async def stream(session: StreamSession, audio: np.ndarray, chunk: float = 0.25, clock=None):
    events, step = [], int(chunk * SR)
    for i in range(0, audio.size, step):
        if clock is not None:
            clock[0] = (i + step) / SR
        session.insert_audio(audio[i : i + step])
        events += await session.process()
    events += await session.finish()
    return events


class LoadedScheduler(ModelScheduler):
    """A scheduler that reports a fixed load level (pipeline/load.py)."""

    level = 0

    @property
    def load(self) -> Load:
        return Load(self.level, 0.0)


def run_session(audio, script, options=StreamOptions(), intervals=None, chunk=0.25, fake=None, level=0):
    async def main():
        tr = fake or FakeTranscriber(audio, script)
        scheduler = LoadedScheduler(tr)
        scheduler.level = level
        clock = [0.0]
        vad = ScriptedVad(intervals) if intervals is not None else None
        session = StreamSession(scheduler, options, "s", clock=lambda: clock[0], vad=vad)
        try:
            events = await stream(session, audio, chunk, clock)
        finally:
            await scheduler.close()
        return events, tr

    return asyncio.run(main())


def finals_text(events) -> list[str]:
    return [w.text.strip() for e in events if e.type == "final" for w in e.words]


def test_the_streams_options_reach_its_commit_policy():
    options = StreamOptions(trim_after=9.0, max_buffer=20.0, keep_context=3.0, agree_gap=0.25, settle_after=None,
                            pause_probability=0.9)
    p = policy_options(options)
    assert (p.trim_after, p.max_buffer, p.keep_context, p.agree_gap, p.settle_after, p.pause_probability) == (
        9.0, 20.0, 3.0, 0.25, None, 0.9)


def test_all_words_committed_once_in_order():
    script = make_script(30)
    audio = noise(15)
    events, tr = run_session(audio, script, StreamOptions(vad=False))
    assert finals_text(events) == [w for w, _, _ in script]
    ids = [e.id for e in events if e.type == "final"]
    assert ids == list(range(len(ids)))
    # finals are append-only in time, and a partial never reaches back into committed audio
    last_end = 0.0
    for e in events:
        if e.type == "final":
            assert e.start >= last_end - 0.1
            last_end = e.end
        if e.type == "partial" and e.words:
            assert e.words[0].start >= last_end - 0.1
            assert "~" not in "".join(finals_text([e]))
    assert not any("~" in t for t in finals_text(events))


def test_every_decode_is_logged_at_debug_with_its_window_words_and_commits(caplog):
    script = make_script(12)
    with caplog.at_level(logging.DEBUG, logger="specscribe.pipeline.session"):
        events, _ = run_session(noise(6), script, StreamOptions(vad=False))
    lines = [r.getMessage() for r in caplog.records if r.name == "specscribe.pipeline.session"]
    assert any(" update [" in line for line in lines) and " final [" in lines[-1], lines
    committed = [w.split("@")[0] for line in lines for w in line.split(" committed=")[1].split(" partial=")[0].split("|") if w]
    assert committed == finals_text(events)  # each final word logged once, with the decode that committed it


def test_finals_come_soon_after_the_words_and_latency_stays_flat():
    script = make_script(120)  # 54 s of speech without a sentence end
    audio = noise(56)
    events, tr = run_session(audio, script, StreamOptions(vad=False, update_interval=0.5))
    emitted = {w.text.strip(): e.emitted_at for e in events if e.type == "final" for w in e.words}
    lat = [emitted[w] - end for w, _, end in script[:-3]]
    assert max(lat) < 1.6, max(lat)  # two 0.5 s updates plus the chunk, never growing
    assert np.mean(lat[-30:]) <= np.mean(lat[:30]) + 0.2
    # the decoded span stays bounded by max_buffer even with no sentence ends
    assert max(d for _, d in tr.windows) <= StreamOptions().max_buffer + 1.0


def test_encoder_sees_the_buffer_plus_its_pad_not_a_full_window():
    script = make_script(30)
    events, tr = run_session(noise(15), script, StreamOptions(vad=False, encoder_pad=4.0))
    assert tr.encoder_windows and len(tr.encoder_windows) == len(tr.windows)
    for window, (_, duration) in zip(tr.encoder_windows, tr.windows):
        assert window == pytest.approx(duration + 4.0)
    _, full = run_session(noise(15), script, StreamOptions(vad=False, encoder_pad=30.0))
    assert set(full.encoder_windows) == {None}  # the batch setting: Whisper's 30 s window


@pytest.mark.parametrize("context", [0.0, 4.0])
def test_buffer_trimmed_at_sentence_ends(context):
    script = make_script(40, sentence_every=5)
    audio = noise(20)
    events, tr = run_session(audio, script, StreamOptions(vad=False, keep_context=context))
    assert finals_text(events) == [w for w, _, _ in script]
    longest = max(d for _, d in tr.windows)
    # a sentence is ~2.3 s: the buffer starts at the last one, or at the last that leaves 4 s of context
    assert longest < 6.0 if context == 0 else 6.0 < longest < 10.0


def test_prompt_and_previous_hypothesis_are_passed():
    script = make_script(20)
    audio = noise(10)
    events, tr = run_session(audio, script, StreamOptions(vad=False, trim_after=3.0))
    assert any(r.prompt_tokens for r in tr.requests)
    assert sum(1 for r in tr.requests if r.hypothesis_tokens) >= len(tr.requests) // 3
    assert all(r.task == "transcribe" and not r.timestamps for r in tr.requests)
    events, tr = run_session(audio, script, StreamOptions(vad=False, draft=False))
    assert not any(r.hypothesis_tokens for r in tr.requests)


@pytest.mark.parametrize("stop_word", ["w2", "w9"])
def test_a_decode_that_stops_early_is_continued_after_its_last_word(stop_word):
    """Whisper sometimes ends a window after a few words and decodes that window the same way at every
    update: the speech after them would come only when the buffer moves past them, or never. The VAD
    hears speech after the last word, so the rest of the window is decoded on its own and joined."""
    script = make_script(16, start=0.5)  # speech 0.5-7.7 s, no sentence end
    fake = FakeTranscriber(noise(9.5), script)
    fake.stops_after = {stop_word}
    events, tr = run_session(fake.stream, script, StreamOptions(), intervals=[(0.5, 7.7)], fake=fake)
    assert finals_text(events) == [w for w, _, _ in script]
    stop_end = next(end for w, _, end in script if w == stop_word)
    assert any(off == pytest.approx(stop_end, abs=0.02) for off, _ in tr.windows)  # the rest, on its own
    emitted = {w.text.strip(): e.emitted_at for e in events if e.type == "final" for w in e.words}
    after = [emitted[w] - end for w, _, end in script if end > stop_end + 1.0 and end < 7.0]
    assert after and max(after) < 2.0  # by agreement, as usual, not at the utterance's end
    assert next(e.stats for e in events if e.type == "stats")["continued"] >= 1


def test_where_a_hypothesis_stopped_early():
    from specscribe.pipeline.stream_jobs import LONGEST_WORD, stopped_at

    frames = lambda a, b: np.arange(a, b, 0.032)  # noqa: E731 (VAD speech frames, seconds into the window)
    words = [Word(0.2, 0.6, " so", 0.9), Word(0.7, 1.2, " days.", 0.9)]
    assert stopped_at(words, 8.0, frames(0.2, 6.0)) == (1, pytest.approx(1.2))
    assert stopped_at(words, 8.0, frames(0.2, 1.6)) is None  # no more speech after it
    assert stopped_at(words, 8.0, None) is None  # no VAD: not known
    assert stopped_at(words, 1.8, frames(0.2, 1.8)) is None  # too little audio left to decode on its own
    stretched = words[:1] + [Word(1.0, 6.0, " days.", 0.9)]  # DTW stretched it over the speech Whisper skipped
    assert stopped_at(stretched, 8.0, frames(0.2, 6.0)) == (1, pytest.approx(1.0 + LONGEST_WORD))
    # a jump inside the window: "I'm" over 5 s of speech, then the words of the window's end
    jumped = words + [Word(1.4, 6.4, " I'm", 0.1), Word(6.4, 6.9, " late.", 0.6)]
    assert stopped_at(jumped, 8.0, frames(0.2, 7.0)) == (2, pytest.approx(1.4 + LONGEST_WORD))
    assert stopped_at(jumped, 8.0, np.concatenate([frames(0.2, 1.4), frames(6.4, 7.0)])) is None  # a pause


def test_a_word_started_in_a_pause_starts_at_its_speech():
    from specscribe.pipeline.stream_jobs import ONSET_LEAD, speech_onsets

    frames = lambda a, b: np.arange(a, b, 0.032)  # noqa: E731 (VAD speech frames, seconds into the window)
    # JFK as a context decode times it: "Americans" ends 2.0 (its "s" to 2.2), "ask" starts 2.08, said at 3.3
    speech = np.concatenate([frames(1.5, 2.2), frames(3.3, 3.7)])
    words = [Word(1.54, 2.0, " Americans,", 0.9), Word(2.08, 3.68, " ask", 0.9), Word(3.68, 4.0, " not", 0.9)]
    moved = speech_onsets(words, speech)
    assert moved[1].start == pytest.approx(3.3 - ONSET_LEAD, abs=0.032) and moved[1].end == 3.68
    assert moved[0] == words[0] and moved[2] == words[2]  # in speech from its start: as DTW put it
    assert speech_onsets(words, None) == words  # no VAD: not known
    # a start in the pause itself, with no tail of the word before it
    assert speech_onsets([Word(0.0, 1.0, " And", 0.9)], frames(0.6, 1.0))[0].start == pytest.approx(0.5, abs=0.032)
    # more speech than a tail before the gap: the word is said there, and its end is stretched
    assert speech_onsets([Word(1.0, 3.0, " so", 0.9)], np.concatenate([frames(1.0, 1.5), frames(2.5, 3.0)]))[0].start == 1.0
    # no speech after the gap inside the word: nothing to move it to
    assert speech_onsets([Word(2.08, 3.0, " ask", 0.9)], frames(1.5, 2.2))[0].start == 2.08
    # a stop inside a word (shorter than ONSET_GAP) is no pause
    assert speech_onsets([Word(2.0, 2.6, " ask", 0.9)], np.concatenate([frames(2.0, 2.2), frames(2.4, 2.6)]))[0].start == 2.0


def test_a_hypothesis_is_not_continued_over_silence():
    script = make_script(6, start=0.5)  # speech 0.5-3.2 s, then silence
    fake = FakeTranscriber(noise(6.0), script)
    events, tr = run_session(fake.stream, script, StreamOptions(), intervals=[(0.5, 3.2)], fake=fake)
    assert finals_text(events) == [w for w, _, _ in script]
    assert all(off < 0.5 for off, _ in tr.windows)  # every decode starts at the utterance
    assert next(e.stats for e in events if e.type == "stats")["continued"] == 0


def test_speech_end_commits_the_utterance_and_silence_is_not_decoded():
    script = make_script(6, start=1.0) + make_script(6, start=8.0)
    script = [(f"{'b' if i >= 6 else 'a'}{i}", s, e) for i, (_, s, e) in enumerate(script)]
    audio = noise(14)
    intervals = [(1.0, 3.6), (8.0, 10.6)]
    events, tr = run_session(audio, script, StreamOptions(), intervals=intervals)
    types = [e.type for e in events]
    assert types.count("speech_start") == 2 and types.count("speech_end") == 2
    first_end = types.index("speech_end")
    assert finals_text(events[:first_end]) == [w for w, _, _ in script[:6]]
    assert finals_text(events) == [w for w, _, _ in script]
    # no decode while nobody speaks: every window ends inside an utterance (+ pad + min_silence)
    for off, dur in tr.windows:
        end = off + dur
        assert any(a < end <= b + 1.0 for a, b in intervals), (off, dur)


def test_a_pause_commits_the_utterance_before_the_vad_ends_it():
    # a0-a5 end at 3.6 s; the VAD ends the utterance after 0.6 s of silence (at 4.2 s, seen at 4.25)
    script = [(f"a{i}", s, e) for i, (_, s, e) in enumerate(make_script(6, start=1.0))]
    audio, intervals = noise(6), [(1.0, 3.6)]
    for pause, at in ((None, 4.25), (0.3, 4.0)):  # 0.3 s of silence: in the chunk that ends at 4.0 s
        events, tr = run_session(audio, script, StreamOptions(pause_commit=pause), intervals=intervals)
        assert finals_text(events) == [w for w, _, _ in script]
        last = next(e for e in events if e.type == "final" and e.text.endswith("a5"))
        end = next(e for e in events if e.type == "speech_end")
        assert last.emitted_at == pytest.approx(at) and events.index(last) < events.index(end)
        # the update at 3.75 s heard all the speech: neither the pause nor the VAD's end decodes again
        assert max(off + dur for off, dur in tr.windows) == pytest.approx(3.75)


def _paused_session(second_start: float, level: int = 0, options: StreamOptions = StreamOptions(),
                    heard: str = "x3"):
    """a0-a3 (1.0-2.7 s), a pause, b0-b3 from second_start; a window ending in the pause hears a3 as
    `heard`, unsure; one that reaches past 3.6 s hears it right."""
    script = [(f"a{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=1.0))]
    script += [(f"b{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=second_start))]
    audio = noise(second_start + 4)
    fake = FakeTranscriber(audio, script)
    fake.doubt = {"a3": (heard, 3.6)}
    intervals = [(1.0, 2.7), (second_start, second_start + 1.7)]
    events, _ = run_session(audio, script, options, intervals=intervals, fake=fake, level=level)
    return events


def test_under_load_a_pause_commits_the_unsure_words_at_once():
    """From load level 1 the next utterance's decode, which would settle held words, comes late: no holding."""
    events = _paused_session(second_start=3.4, level=1)
    first_end = [e.type for e in events].index("speech_end")
    assert finals_text(events[:first_end]) == ["a0", "a1", "a2", "x3"]
    assert finals_text(events)[4:] == ["b0", "b1", "b2", "b3"]


def test_a_short_pause_holds_unsure_words_for_the_speech_after_it():
    events = _paused_session(second_start=3.4)
    assert finals_text(events) == ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]
    first_end = [e.type for e in events].index("speech_end")
    assert finals_text(events[:first_end]) == ["a0", "a1", "a2"]  # the sure words at once
    partials = [e.text for e in events[:first_end] if e.type == "partial"]
    assert partials[-1] == "x3"  # shown, not final, while the pause lasts


def test_a_long_pause_commits_the_held_words_before_the_next_utterance():
    events = _paused_session(second_start=6.5)
    assert finals_text(events) == ["a0", "a1", "a2", "x3", "b0", "b1", "b2", "b3"]
    types = [e.type for e in events]
    held = next(e for e in events if e.type == "final" and e.text == "x3")
    second_start = [i for i, t in enumerate(types) if t == "speech_start"][1]
    assert types.index("speech_end") < events.index(held) < second_start


def check_lines(events) -> list[str]:
    """Every final is in exactly one line, in order; a line comes after its last final and before the
    next final. Returns the lines' texts."""
    open_ids, texts = [], []
    for e in events:
        if e.type == "final":
            open_ids.append(e.id)
            open_texts = [f.text for f in events if f.type == "final" and f.id in open_ids]
        elif e.type == "line":
            assert open_ids and e.id == open_ids[-1], (e.id, open_ids)
            assert e.text == " ".join(open_texts)
            texts.append(e.text)
            open_ids = []
    assert open_ids == [], "finals left without a line at the stream's end"
    return texts


def test_finals_are_grouped_into_lines_at_sentence_ends():
    script = make_script(40, sentence_every=5)
    events, _ = run_session(noise(20), script, StreamOptions(vad=False))
    lines = check_lines(events)
    assert lines == [" ".join(w for w, _, _ in script[i : i + 5]) for i in range(0, 40, 5)]


def test_a_long_run_without_sentence_ends_is_cut_by_length_and_duration():
    script = make_script(60)  # 27 s of speech, no punctuation
    events, _ = run_session(noise(30), script, StreamOptions(vad=False))
    lines = check_lines(events)
    assert len(lines) >= 4 and " ".join(lines).split() == [w for w, _, _ in script]
    spans = [e.end - e.start for e in events if e.type == "line"]
    assert max(len(t) for t in lines) <= 84 and max(spans) <= 7.0


def test_a_long_commit_is_cut_into_finals_at_sentence_ends():
    """No update inside the utterance (a long interval): it is all committed at its speech end, as
    several finals, so that its lines can still end where its sentences do."""
    script = make_script(20, start=1.0, sentence_every=5)
    events, _ = run_session(noise(12), script, StreamOptions(update_interval=60.0), intervals=[(1.0, 9.95)])
    finals = [e.text for e in events if e.type == "final"]
    assert finals == [" ".join(w for w, _, _ in script[i : i + 5]) for i in range(0, 20, 5)]
    assert check_lines(events) == finals


def test_a_pause_ends_the_line_when_nothing_is_held():
    script = [(f"a{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=1.0))]
    script += [(f"b{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=4.5))]
    events, _ = run_session(noise(8), script, StreamOptions(), intervals=[(1.0, 2.7), (4.5, 6.2)])
    assert check_lines(events) == ["a0 a1 a2 a3", "b0 b1 b2 b3"]
    first_line = next(e for e in events if e.type == "line")
    # 1 s after its last word (2.65 s), during the pause, not when the next speech comes
    assert 3.6 <= first_line.emitted_at < 4.5


def test_held_words_join_their_line_before_it_ends():
    events = _paused_session(second_start=6.5)
    assert check_lines(events) == ["a0 a1 a2 x3", "b0 b1 b2 b3"]
    events = _paused_session(second_start=3.4)  # a short pause: the speech after it continues the line
    assert check_lines(events) == ["a0 a1 a2 a3 b0 b1 b2 b3"]


def test_finals_carry_the_alternatives_of_their_span_when_asked():
    script = make_script(12, sentence_every=4)
    audio = noise(7)
    options = StreamOptions(vad=False, beam_size=3, n_best=2, hotwords="Dvořák")
    events, tr = run_session(audio, script, options)
    assert all(r.beam_size == 3 and r.n_best == 2 and r.hotwords == "Dvořák" for r in tr.requests if r.task == "transcribe")
    finals = [e for e in events if e.type == "final"]
    assert finals_text(events) == [w for w, _, _ in script]
    with_alts = [f for f in finals if f.alternatives]
    assert with_alts and all(f.alternatives[0] == f.text for f in with_alts)
    assert any(len(f.alternatives) == 2 and "x" in f.alternatives[1] for f in with_alts)
    plain, _ = run_session(audio, script, StreamOptions(vad=False))
    assert not any(e.alternatives for e in plain)


def test_the_language_locks_after_seconds_of_agreeing_speech_not_on_a_short_guess():
    script = make_script(14)  # 0.5 .. 6.7 s of speech
    audio = noise(8)
    fake = FakeTranscriber(audio, script)
    fake.heard = lambda off, dur: {"cy": 0.6, "en": 0.4} if dur < 3.0 else {"en": 0.9, "cy": 0.1}
    events, tr = run_session(audio, script, StreamOptions(language=None), intervals=[(0.5, 6.7)], fake=fake)
    said = [(e.language, e.locked) for e in events if e.type == "language"]
    assert said[0] == ("cy", False) and said[-1] == ("en", True) and ("cy", True) not in said
    locked_at = next(i for i, e in enumerate(events) if e.type == "language" and e.locked)
    assert all(e.language == "en" for e in events[locked_at:] if e.type == "final")
    assert tr.requests[0].language == "cy"  # decoded in the best guess so far...
    assert tr.requests[-1].language == "en"  # ...then in the locked language
    n = len(fake.detections)
    assert 0 < n < len(tr.requests)  # no detection pass once locked and the utterance checked


@pytest.mark.parametrize("shift", [9.0, 6.1])  # German from 9.5 s (a long pause) or 6.6 s (0.8 s after the English)
def test_a_speaker_who_switches_language_is_followed_at_the_next_utterance(shift):
    script = make_script(12, start=0.5) + [(f"v{i}", s + shift, e + shift) for i, (_, s, e) in enumerate(make_script(10, start=0.5))]
    audio = noise(15)
    german_start = 0.5 + shift
    fake = FakeTranscriber(audio, script)
    fake.heard = lambda off, dur: {"de": 0.96, "en": 0.04} if off + dur > german_start else {"en": 0.97, "de": 0.03}
    intervals = [(0.5, 5.9), (german_start, german_start + 4.5)]
    events, tr = run_session(audio, script, StreamOptions(language=None), intervals=intervals, fake=fake)
    said = [(e.language, e.locked) for e in events if e.type == "language"]
    assert said == [("en", False), ("en", True), ("de", True)]  # under 4 s, then locked, then the switch
    finals = [e for e in events if e.type == "final"]
    assert {e.language for e in finals if e.start < 6} == {"en"} and {e.language for e in finals if e.start > 6} == {"de"}
    assert finals_text(events) == [w for w, _, _ in script]
    # no German decode hears the English text as its prompt, nor the English speech as context
    german = [(r, w) for r, w in zip(tr.requests, fake.windows) if r.language == "de"]
    prompts = [fake.decode_tokens(r.prompt_tokens).split() for r, _ in german]
    assert german and all(w.startswith("v") for p in prompts for w in p), prompts
    assert min(off for _, (off, _) in german) >= 5.9, [w for _, w in german]


@pytest.mark.parametrize("apart", [True, False], ids=["detect-apart", "before"])
def test_an_utterance_checked_for_its_language_is_decoded_with_the_context_before_it(apart):
    """The language is re-checked at each utterance on its own audio; the decode still hears the utterance with
    the speech before it (keep_context), as it does with a given language (detect_apart; False: without it)."""
    first = make_script(12, start=0.5, sentence_every=12)  # 0.5 .. 5.8 s
    second = [(f"v{i}", s + 6.1, e + 6.1) for i, (_, s, e) in enumerate(make_script(8, start=0.5))]  # 6.6 .. 10.1 s
    audio = noise(12)
    fake = FakeTranscriber(audio, first + second)
    options = StreamOptions(language=None, detect_apart=apart)
    events, tr = run_session(audio, first + second, options, intervals=[(0.5, 5.8), (6.6, 10.1)], fake=fake)
    assert finals_text(events) == [w for w, _, _ in first + second]
    own = 6.6 - options.speech_pad  # the second utterance's own audio starts here
    late = [(off, dur) for off, dur in fake.detections if off + dur > 6.6]
    assert late and all(off >= own - 0.01 for off, _ in late), fake.detections  # the detector hears it alone
    # its first 2 s (LanguageOptions.switch_seconds) are checked: those decodes hear the first utterance too
    checked = [(off, dur) for off, dur in fake.decoded if 6.6 < off + dur <= 8.6]
    assert checked and all((off < 5.8) == apart for off, _ in checked), fake.decoded


def test_the_allow_list_keeps_detection_among_the_listed_languages():
    script = make_script(12)
    audio = noise(7)
    fake = FakeTranscriber(audio, script)
    fake.heard = lambda off, dur: {"cy": 0.7, "en": 0.27, "de": 0.03}  # among en and de: en 0.9
    events, tr = run_session(audio, script, StreamOptions(language=None, languages=("en", "de")), intervals=[(0.5, 5.9)], fake=fake)
    assert {r.language for r in tr.requests if r.task == "transcribe"} == {"en"}
    assert [(e.language, e.locked) for e in events if e.type == "language"] == [("en", False), ("en", True)]


def test_rejected_decodes_give_no_text():
    script = make_script(10)
    audio = noise(6)
    fake = FakeTranscriber(audio, script, no_speech=True)
    events, tr = run_session(audio, script, StreamOptions(vad=False), fake=fake)
    assert tr.decode_calls > 0
    assert not [e for e in events if e.type in ("final", "partial") and e.text]
    stats = [e for e in events if e.type == "stats"][0].stats
    assert stats["rejected"] == tr.decode_calls


def test_a_rejected_last_decode_keeps_the_utterance():
    """The decode at the speech end goes into a repetition loop (the guards drop it): the words of
    the last good hypothesis are committed, not lost."""
    script = make_script(8)  # 0.5 .. 4.0 s
    audio = noise(7)
    fake = FakeTranscriber(audio, script, repeat_after=3.9)
    events, tr = run_session(audio, script, StreamOptions(), intervals=[(0.5, 4.0)], fake=fake)
    assert tr.decode_calls > 2
    stats = [e for e in events if e.type == "stats"][0].stats
    assert stats["rejected"] >= 1
    # w0-w6 were agreed before; the decodes after 3.9 s fail, so the last good hypothesis' tail
    # (w7 as it was then, cut by that window's end) is committed rather than dropped
    got = finals_text(events)
    assert got[:7] == [w for w, _, _ in script][:7] and len(got) == 8 and got[7].startswith("w7"), got


@pytest.mark.parametrize("retry", [True, False], ids=["retried", "dropped"])
def test_a_looping_decode_is_decoded_again_with_timestamps(retry):
    """Whisper loops on a window ("... for you, ask what you can do for you, ask what you can do for you ...",
    JFK at [4.76, 9.8) s on base) and, with timestamp tokens, does not: the decode is done again that way, on the
    same encoder output, and its words count; without the retry the utterance's last words were lost."""
    script = make_script(8)  # 0.5 .. 4.0 s
    audio = noise(7)
    fake = FakeTranscriber(audio, script, repeat_after=3.9)
    fake.loops_with_timestamps = False
    events, tr = run_session(audio, script, StreamOptions(retry_loops=retry), intervals=[(0.5, 4.0)], fake=fake)
    stats = [e for e in events if e.type == "stats"][0].stats
    if not retry:  # StreamOptions.retry_loops False: the loop's text is dropped, the utterance's last word cut
        assert finals_text(events)[-1] == "w7~" and stats["rejected"] >= 1 and stats["retried"] == 0
        return
    assert finals_text(events) == [w for w, _, _ in script]
    looped = [i for i, r in enumerate(tr.requests) if not r.timestamps and fake.decoded[i][1] >= 3.9]
    assert looped and all(tr.requests[i + 1].timestamps and fake.decoded[i + 1] == fake.decoded[i] for i in looped)
    assert tr.encode_calls == len(tr.requests) - len(looped)  # the retry reuses the encoder output
    assert stats["rejected"] == 0 and stats["retried"] == len(looped)


def test_a_decode_that_loops_with_timestamps_too_is_decoded_without_its_prompt():
    """A window that loops under its prompt, with or without timestamp tokens, and decodes right without the
    prompt: the third decode of the same encoder output keeps its words (before, they were dropped)."""
    script = make_script(24, sentence_every=4)  # 0.5 .. 11.3 s, a sentence end every 4 words
    audio = noise(13)
    fake = FakeTranscriber(audio, script, repeat_after=2.5)
    fake.loops_without_prompt = False
    options = StreamOptions(keep_context=0.0)  # the buffer cut at each committed sentence end: later windows have a prompt
    events, tr = run_session(audio, script, options, intervals=[(0.5, 11.3)], fake=fake)
    assert finals_text(events) == [w for w, _, _ in script]
    thirds = [i for i, r in enumerate(tr.requests) if r.timestamps and not r.prompt_tokens and i >= 2
              and tr.requests[i - 1].timestamps and tr.requests[i - 1].prompt_tokens
              and not tr.requests[i - 2].timestamps and fake.decoded[i] == fake.decoded[i - 2]]
    assert thirds  # decode, with timestamps, without the prompt: one encoder output
    stats = next(e.stats for e in events if e.type == "stats")
    assert stats["rejected"] == 0 and stats["retried"] >= len(thirds)


def test_translation_follows_its_final():
    script = make_script(12, sentence_every=4)
    audio = noise(7)
    events, tr = run_session(audio, script, StreamOptions(vad=False, translate=True))
    finals = {e.id: e for e in events if e.type == "final"}
    translations = [e for e in events if e.type == "translation"]
    assert len(translations) == 3
    seen_final_ids = set()
    covered = []
    for e in events:
        if e.type == "final":
            seen_final_ids.add(e.id)
        if e.type == "translation":
            assert e.id in seen_final_ids  # emitted after the final it is keyed to
            assert finals[e.id].end == e.end
            covered += e.text.split()
    assert covered == [w.upper() for w, _, _ in script]
    assert sum(1 for r in tr.requests if r.task == "translate") == 3


class LoopingUnderPromptTranscriber(FakeTranscriber):
    """Translates into a repetition loop whenever a prompt is given (Whisper pulled by the previous translation)."""

    def decode(self, encoded, request):
        result = super().decode(encoded, request)
        if request.task != "translate" or not request.prompt_tokens:
            return result
        return dataclasses.replace(result, text=" to deliver," * 30)


def test_a_translation_that_loops_under_its_prompt_is_decoded_again_without_it():
    script = make_script(12, sentence_every=4)
    audio = noise(7)
    fake = LoopingUnderPromptTranscriber(audio, script)
    events, tr = run_session(audio, script, StreamOptions(vad=False, translate=True), fake=fake)
    covered = [w for e in events if e.type == "translation" for w in e.text.split()]
    assert covered == [w.upper() for w, _, _ in script]  # every final translated, none lost to the loop
    translate = [r for r in tr.requests if r.task == "translate"]
    assert [bool(r.prompt_tokens) for r in translate] == [False, True, False, True, False]  # 2 retries


@pytest.mark.parametrize("language,draft,drafted", [("en", True, True), ("de", True, False), ("en", False, False)])
def test_english_translation_drafts_the_transcript(language, draft, drafted):
    """English speech translated to English is verified against its own finals' text as the draft."""
    script = make_script(12, sentence_every=4)
    events, tr = run_session(noise(7), script, StreamOptions(vad=False, translate=True, language=language, draft=draft))
    requests = [r for r in tr.requests if r.task == "translate"]
    assert len(requests) == 3
    groups = [[w for w, _, _ in script[i : i + 4]] for i in (0, 4, 8)]
    expected = [tr.encode_text(" ".join(g)) if drafted else () for g in groups]
    assert [r.hypothesis_tokens for r in requests] == expected
    assert len([e for e in events if e.type == "translation"]) == 3


class WithdrawingScheduler(LoadedScheduler):
    """Takes back every update before it runs, as a server does for a session that falls behind."""

    async def run(self, session_id, fn, priority=Priority.UPDATE):
        if priority == Priority.UPDATE:
            return WITHDRAWN
        return await super().run(session_id, fn, priority)


def test_withdrawn_updates_lose_nothing():
    """An update taken back before it ran gives no events; the utterance's final still commits every word."""
    script = make_script(12)
    intervals = [(0.4, 3.0), (3.6, 5.8)]
    script = [w for w in script if any(a <= w[1] < b for a, b in intervals)]
    audio = noise(7)

    async def main():
        tr = FakeTranscriber(audio, script)
        scheduler = WithdrawingScheduler(tr)
        session = StreamSession(scheduler, StreamOptions(language="en"), "s", vad=ScriptedVad(intervals))
        events = await stream(session, audio)
        await scheduler.close()
        return events, tr

    events, tr = asyncio.run(main())
    assert finals_text(events) == [w for w, _, _ in script]
    assert not [e for e in events if e.type == "partial" and e.text]
    stats = events[-1].stats
    assert stats["withdrawn"] >= 4 and stats["updates"] == tr.decode_calls == 2  # one decode per utterance


class HoldingScheduler(LoadedScheduler):
    """Holds every update until it is recalled (withdraw with running=True), as a busy model thread would."""

    def __init__(self, transcriber):
        super().__init__(transcriber)
        self.holding = asyncio.Event()  # set while an update is held
        self.recalls = 0
        self._recall = asyncio.Event()

    async def run(self, session_id, fn, priority=Priority.UPDATE):
        if priority != Priority.UPDATE:
            return await super().run(session_id, fn, priority)
        self._recall.clear()
        self.holding.set()
        await self._recall.wait()
        self.holding.clear()
        return WITHDRAWN

    def withdraw(self, session_id, priority=Priority.UPDATE, running=False):
        if running and priority == Priority.UPDATE and self.holding.is_set():
            self.recalls += 1
            self._recall.set()
        return 0


def test_audio_that_ends_the_utterance_recalls_the_update_in_flight():
    """Audio queued while an update runs is shown to lookahead; the chunk that completes the VAD's silence
    recalls the update, and once inserted the utterance's final commits every word."""
    intervals = [(0.4, 3.0)]
    script = [w for w in make_script(8) if w[1] < 3.0]
    audio, step = noise(5), int(0.25 * SR)

    async def main():
        tr = FakeTranscriber(audio, script)
        scheduler = HoldingScheduler(tr)
        session = StreamSession(scheduler, StreamOptions(language="en"), "s", vad=ScriptedVad(intervals))
        events, i = [], 0
        while True:  # as a caller does: each chunk shown to lookahead, inserted, processed
            chunk = audio[i : i + step]
            i += step
            assert not session.lookahead(chunk)  # no update in flight: nothing to recall
            session.insert_audio(chunk)
            task = asyncio.create_task(session.process())
            held = asyncio.create_task(scheduler.holding.wait())
            await asyncio.wait({task, held}, return_when=asyncio.FIRST_COMPLETED)
            held.cancel()
            if not task.done():
                break  # an update is in flight
            events += task.result()
        held_at, queued, recalled_at = i, [], None
        while not task.done() and i < audio.size:  # audio keeps arriving and waits in the caller's queue
            chunk = audio[i : i + step]
            i += step
            queued.append(chunk)
            if session.lookahead(chunk):
                recalled_at = i
            await asyncio.sleep(0)
        assert task.done(), "the update was never recalled"
        events += task.result()
        for chunk in queued:
            session.insert_audio(chunk)
        events += await session.process()
        finals_then = finals_text(events)
        session.insert_audio(audio[i:])
        events += await session.process() + await session.finish()
        await scheduler.close()
        return events, held_at, recalled_at, finals_then, scheduler.recalls

    events, held_at, recalled_at, finals_then, recalls = asyncio.run(main())
    assert held_at < int(3.0 * SR)  # the update was held during the speech
    assert recalled_at == int(3.75 * SR)  # the first chunk past 3.0 s + 0.6 s of silence
    assert recalls == 1
    assert finals_then == [w for w, _, _ in script]  # the final came with the recalled audio
    assert events[-1].stats["withdrawn"] == 1


def test_stats_event_and_pending_seconds():
    script = make_script(8)
    audio = noise(5)

    async def main():
        tr = FakeTranscriber(audio, script)
        scheduler = ModelScheduler(tr)
        session = StreamSession(scheduler, StreamOptions(vad=False), "s")
        session.insert_audio(audio[: SR // 4])
        session.insert_audio(audio[SR // 4 : SR])
        assert session.pending_seconds == pytest.approx(1.0)
        await session.process()
        assert session.pending_seconds == 0.0
        session.insert_audio(audio[SR:])
        events = await session.finish()
        await scheduler.close()
        return events, tr

    events, tr = asyncio.run(main())
    stats = events[-1]
    assert stats.type == "stats"
    assert stats.stats["audio_s"] == pytest.approx(5.0)
    assert stats.stats["updates"] == tr.decode_calls
    # the totals are the sum over every decode the session ran, and the ratios are the totals'
    total = sum(tr.returned_stats, SpecStats())
    assert len(tr.returned_stats) == tr.decode_calls >= 2
    assert (stats.stats["target_passes"], stats.stats["tokens"]) == (total.target_passes, total.tokens)
    assert (stats.stats["drafted"], stats.stats["accepted"]) == (total.drafted, total.accepted)
    assert stats.stats["tokens_per_target_pass"] == pytest.approx(total.tokens / total.target_passes, abs=1e-4)
    assert stats.stats["acceptance_rate"] == pytest.approx(total.accepted / total.drafted, abs=1e-4)
    assert "rtf" in stats.stats


def test_two_sessions_share_a_scheduler_without_mixing():
    a_script = [(f"a{i}", s, e) for i, (_, s, e) in enumerate(make_script(10))]
    b_script = [(f"b{i}", s, e) for i, (_, s, e) in enumerate(make_script(10, start=0.3))]
    a_audio, b_audio = noise(6, seed=1), noise(6, seed=2)

    class Router(FakeTranscriber):
        """One model serving two streams: route each window to the stream it came from."""

        def __init__(self):
            self.fakes = [FakeTranscriber(a_audio, a_script), FakeTranscriber(b_audio, b_script)]
            self.vocab = {}

        def _pick(self, audio):
            return self.fakes[0] if np.any(a_audio == audio[0]) else self.fakes[1]

        def encode(self, audio, window=None):
            fake = self._pick(audio)
            enc = fake.encode(audio, window)
            return EncodedAudio(enc.duration, (fake, enc))

        def decode(self, encoded, request):
            fake, enc = encoded.handle
            return fake.decode(enc, request)

        def language_probabilities(self, encoded, top=10):
            fake, enc = encoded.handle
            return fake.language_probabilities(enc, top)

        def align_words(self, encoded, result):
            return result.segments

    async def main():
        scheduler = ModelScheduler(Router())
        sa = StreamSession(scheduler, StreamOptions(vad=False), "a")
        sb = StreamSession(scheduler, StreamOptions(vad=False), "b")
        ea, eb = await asyncio.gather(stream(sa, a_audio), stream(sb, b_audio))
        await scheduler.close()
        return ea, eb

    ea, eb = asyncio.run(main())
    assert finals_text(ea) == [w for w, _, _ in a_script]
    assert finals_text(eb) == [w for w, _, _ in b_script]


def test_bad_input_is_rejected_clearly():
    async def main():
        scheduler = ModelScheduler(FakeTranscriber(noise(1), []))
        session = StreamSession(scheduler, StreamOptions(vad=False), "s")
        with pytest.raises(ValueError, match="1-D"):
            session.insert_audio(np.zeros((10, 2), np.float32))
        await session.finish()
        with pytest.raises(RuntimeError):
            session.insert_audio(np.zeros(10, np.float32))
        await scheduler.close()

    asyncio.run(main())


@pytest.mark.parametrize("level", [1, 2, 3])
def test_under_load_updates_thin_out_but_every_word_is_committed(level):
    """Degradation spends less per session (longer update interval) and loses nothing."""
    script = make_script(30)
    audio = noise(15)
    calm, calm_tr = run_session(audio, script, StreamOptions(vad=False))
    loaded, loaded_tr = run_session(audio, script, StreamOptions(vad=False), level=level)
    assert finals_text(loaded) == finals_text(calm) == [w for w, _, _ in script]
    expected = calm_tr.decode_calls / 2**level
    assert loaded_tr.decode_calls <= expected * 1.5 + 1  # 2, 4, 8 times fewer updates (+ the last)
    assert loaded_tr.decode_calls < calm_tr.decode_calls


def test_under_load_translations_wait_for_the_utterance_end():
    script = make_script(12, sentence_every=4)
    events, tr = run_session(noise(7), script, StreamOptions(vad=False, translate=True), level=1)
    translations = [e for e in events if e.type == "translation"]
    assert len(translations) == 1  # one, at the end, instead of one per sentence
    assert translations[0].text.split() == [w.upper() for w, _, _ in script]


def test_from_load_level_2_decodes_drop_the_kept_context():
    """Under load an utterance is decoded from its own start: the committed sentences before it are not
    re-encoded and re-decoded (Load.keep_context); at level 0 they are, and both commit every word."""
    starts = (0.5, 4.0, 7.5)
    script = []
    for u, t0 in enumerate(starts):
        for i, (_, s, e) in enumerate(make_script(6, start=t0)):
            script.append((f"u{u}w{i}" + ("." if i == 5 else ""), s, e))
    intervals = [(t0, t0 + 2.6) for t0 in starts]
    audio = noise(12)
    pad = StreamOptions().speech_pad
    windows = {}
    for level in (0, 2):
        events, tr = run_session(audio, script, StreamOptions(language="en"), intervals=intervals, level=level)
        assert finals_text(events) == [w for w, _, _ in script]
        windows[level] = tr.windows

    def reach_back(wins):  # the most a window starts before the start of the utterance it ends in
        return max(max(a - pad for a, _ in intervals if a - pad < off + dur) - off for off, dur in wins)
    assert reach_back(windows[0]) > 2.0  # the sentences before it, as context
    assert reach_back(windows[2]) < 0.05


@pytest.mark.parametrize("level, loaded, want", [(0, 2.0, 5.0), (1, 2.0, 5.0), (2, 2.0, 2.0), (3, 2.0, 2.0),
                                                 (3, None, 5.0), (2, 8.0, 5.0)])
def test_from_load_level_2_decodes_encode_a_shorter_padding(level, loaded, want):
    """Under load each decode encodes its audio plus loaded_encoder_pad (Load.encoder_pad), never more than
    encoder_pad: a cheaper encode for every session; below level 2, and with None, encoder_pad."""
    script = make_script(10)
    options = StreamOptions(vad=False, encoder_pad=5.0, loaded_encoder_pad=loaded)
    events, tr = run_session(noise(7), script, options, level=level)
    assert finals_text(events) == [w for w, _, _ in script]
    pads = {round(window - dur, 3) for window, (_, dur) in zip(tr.encoder_windows, tr.windows)}
    assert pads == {want}


class SlowTranscriber(FakeTranscriber):
    """Each decode takes `delay` seconds of the session's clock: a CPU too slow for the model."""

    def __init__(self, *args, clock: list[float], delay: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.clock, self.delay = clock, delay

    def decode(self, encoded, request):
        self.clock[0] += self.delay
        return super().decode(encoded, request)


def _run_slow(audio, script, intervals, options, doubt=None, delay=1.5):
    """A lone stream on a real ModelScheduler (load level 0) whose decodes each take `delay` seconds."""
    async def main():
        clock = [0.0]
        tr = SlowTranscriber(audio, script, clock=clock, delay=delay)
        tr.doubt = doubt or {}
        scheduler = ModelScheduler(tr)
        session = StreamSession(scheduler, options, "s", clock=lambda: clock[0], vad=ScriptedVad(intervals))
        try:
            return await stream(session, audio, 0.25, clock), tr
        finally:
            await scheduler.close()

    return asyncio.run(main())


def test_a_lone_stream_whose_decodes_are_slow_updates_less_often_and_keeps_its_context():
    """Alone on the model the scheduler sees no lag (it is idle between the stream's decodes), but a stream
    whose own decodes take 1.5 s is behind real time: with own_load its updates come 4 times further apart (load
    level 2 of its own meter, pipeline/load.py); it still decodes with the kept context, and commits every word.
    Its stats say so (stream_load), and a stream whose decodes are quick shows level 0."""
    starts = (0.5, 4.0, 7.5)
    script = [(f"u{u}w{i}" + ("." if i == 5 else ""), s, e)
              for u, t0 in enumerate(starts) for i, (_, s, e) in enumerate(make_script(6, start=t0))]
    intervals = [(t0, t0 + 2.6) for t0 in starts]
    audio = noise(12)
    pad = StreamOptions().speech_pad
    calls = {}
    for own_load in (True, False):
        events, tr = _run_slow(audio, script, intervals, StreamOptions(language="en", own_load=own_load))
        assert finals_text(events) == [w for w, _, _ in script]
        reach_back = max(max(a - pad for a, _ in intervals if a - pad < off + dur) - off for off, dur in tr.windows)
        assert reach_back > 2.0  # the sentences before an utterance re-decoded as context, either way
        calls[own_load] = tr.decode_calls
        own = events[-1].stats["stream_load"]  # reported to the client either way (protocol.md, Load)
        assert events[-1].type == "stats" and own["level_max"] == 2 and own["update_factor"] == 4
    assert calls[True] < calls[False] / 2, calls
    events, _ = _run_slow(audio, script, intervals, StreamOptions(language="en"), delay=0.05)
    assert events[-1].stats["stream_load"] == {"level": 0, "lag_s": pytest.approx(0.05, abs=0.05), "update_factor": 1,
                                               "level_max": 0}


def test_a_slow_streams_own_load_starts_afresh_after_a_long_pause():
    """A lone slow stream reaches level 2 of its own meter in its first utterance; after a pause longer than
    CONTEXT_GAP the next utterance decodes without context (short, cheap decodes), so its first update comes
    as soon after its start as the first utterance's did (the meter is reset), not four intervals later. Every
    word is committed either way."""
    starts = (0.5, 6.5)
    script = [(f"u{u}w{i}" + ("." if i == 5 else ""), s, e)
              for u, t0 in enumerate(starts) for i, (_, s, e) in enumerate(make_script(6, start=t0))]
    intervals = [(t0, t0 + 2.6) for t0 in starts]
    options = StreamOptions(language="en")
    events, tr = _run_slow(noise(10), script, intervals, options)
    assert finals_text(events) == [w for w, _, _ in script]
    assert events[-1].stats["stream_load"]["level_max"] == 2  # the first utterance's decodes were behind
    after = [min(off + dur for off, dur in tr.windows if off + dur > t0) - t0 for t0 in starts]
    assert after[1] == pytest.approx(after[0]) and after[0] < 2 * options.update_interval, (after, tr.windows)


def test_a_lone_slow_stream_still_holds_unsure_words_over_a_pause():
    """Its own load thins its updates out but holding costs no model time: the unsure word waits for the speech
    after the pause, which corrects it (JFK's "asked not" for "ask not" in the browser test, with translation)."""
    script = [(f"a{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=1.0))]
    script += [(f"b{i}", s, e) for i, (_, s, e) in enumerate(make_script(4, start=3.4))]
    events, tr = _run_slow(noise(7.4), script, [(1.0, 2.7), (3.4, 5.1)], StreamOptions(),
                           doubt={"a3": ("x3", 3.6)})
    assert finals_text(events) == ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]


def test_a_translation_waits_for_the_words_held_over_a_pause():
    """`live --translate` on JFK translated "And so my fellow" as "and so my", then "Americans" alone: the pause held
    the unsure "Americans" back and the utterance's end translated the finals before it, the span ending where the
    held word starts. The group now waits for the held words, and is translated with them."""
    # a3 is unsure (heard right, p 0.3) until a decode hears the speech after the pause
    events = _paused_session(second_start=3.4, options=StreamOptions(translate=True), heard="a3")
    script = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"]
    assert finals_text(events) == script
    translations = [e.text.split() for e in events if e.type == "translation"]
    assert translations and translations[0][:4] == ["A0", "A1", "A2", "A3"], translations
    assert sorted(w for t in translations for w in t) == sorted(w.upper() for w in script)


def test_agree_gap_reaches_the_policy_and_the_cli(capsys):
    """StreamOptions.agree_gap is the session policy's (pipeline/policy.py tests its rule); `live` and `serve`
    take it as --agree-gap and refuse a negative one."""
    from specscribe.cli import build_parser, main

    session = StreamSession(ModelScheduler(object()), StreamOptions(vad=False, agree_gap=0.5), "s")
    assert session._policy.options.agree_gap == 0.5
    for command in ("live", "serve"):
        assert build_parser().parse_args([command, "--agree-gap", "0.5"]).agree_gap == 0.5
        assert build_parser().parse_args([command]).agree_gap == StreamOptions().agree_gap
    for argv in (["live", "--input", "missing.wav"], ["serve", "--port", "0"]):
        assert main([*argv, "--agree-gap", "-1"]) != 0
        assert "--agree-gap must be" in capsys.readouterr().err


def test_settle_after_reaches_the_policy_and_the_cli(capsys):
    """StreamOptions.settle_after is the session policy's (pipeline/policy.py tests its rule); `live` and `serve`
    take it as --settle-after (its default the StreamOptions one; 0 turns it off) and refuse a negative one."""
    from specscribe.cli import build_parser, main
    from specscribe.commands.engine_args import seconds_or_off

    session = StreamSession(ModelScheduler(object()), StreamOptions(vad=False, settle_after=6.0), "s")
    assert session._policy.options.settle_after == 6.0
    for command in ("live", "serve"):
        assert seconds_or_off(build_parser().parse_args([command]).settle_after) == StreamOptions().settle_after
        assert seconds_or_off(build_parser().parse_args([command, "--settle-after", "2.5"]).settle_after) == 2.5
        assert seconds_or_off(build_parser().parse_args([command, "--settle-after", "0"]).settle_after) is None
    for argv in (["live", "--input", "missing.wav"], ["serve", "--port", "0"]):
        assert main([*argv, "--settle-after", "-1"]) != 0
        assert "--settle-after must be" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--update-interval", "0", "--update-interval must be in (0, 5] seconds"),
    ("--update-interval", "6", "--update-interval must be in (0, 5] seconds"),
    ("--agree-gap", "5.5", "--agree-gap must be in [0, 5] seconds"),
    ("--encoder-pad", "-1", "--encoder-pad must be 0 or more"),
    ("--pause-commit", "-0.3", "--pause-commit must be 0 or more"),
])
def test_live_and_serve_refuse_the_same_bad_streaming_flags_in_the_same_words(flag, value, message, capsys):
    """One check (engine_args.check_streaming_args) for both commands' streaming flags: a negative --encoder-pad
    would have encoded less than the audio, a negative --pause-commit silently meant off."""
    from specscribe.cli import main

    for argv in (["live", "--input", "missing.wav"], ["serve", "--port", "0"]):
        assert main([*argv, flag, value]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("hold_unsure", [True, False])
def test_a_repeated_word_committed_from_the_partial_is_kept(hold_unsure):
    """"so it was really very very.": an update commits up to the first "very", the utterance's end commits the
    partial ("very.") without a new decode; stripping the partial as a new hypothesis again took the second
    "very" for the committed one decoded again, and dropped it."""
    words = ["so", "it", "was", "really", "very", "very."]
    script = [(text, s, e) for text, (_, s, e) in zip(words, make_script(6, start=1.0))]
    events, _ = run_session(noise(6), script, StreamOptions(hold_unsure=hold_unsure), intervals=[(1.0, 3.6)])
    assert finals_text(events) == words


@pytest.mark.parametrize("translate", [False, True])
def test_a_short_utterance_in_another_language_keeps_its_language_to_the_end(translate):
    """English locks; a 3-word German utterance follows (too short to switch the stream). Its decodes run in
    German, and so must its finals committed without a new decode (the held partial: they took the stream's
    "en"), its caption line, and its translation's source language (it was the stream's too)."""
    def words(prefix, n, start):
        return [(f"{prefix}{i}", s, e) for i, (_, s, e) in enumerate(make_script(n, start=start))]

    en, de = words("en", 12, 0.5), words("de", 3, 8.0)
    fake = FakeTranscriber(noise(11), en + de)
    fake.heard = lambda offset, duration: {"de": 0.97, "en": 0.03} if offset >= 7.0 else {"en": 0.97, "de": 0.03}
    events, tr = run_session(fake.stream, en + de, StreamOptions(language=None, translate=translate),
                             intervals=[(0.5, en[-1][2]), (8.0, de[-1][2])], fake=fake)
    german = [e for e in events if e.type in ("final", "line") and e.text.startswith("de")]
    assert german and {e.language for e in german} == {"de"}
    if translate:
        sources = [(r.language, offset) for r, (offset, _) in zip(tr.requests, tr.decoded) if r.task == "translate"]
        assert [lang for lang, _ in sources] == ["en", "de"] and sources[1][1] > 7.0
