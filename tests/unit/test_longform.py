"""Long-form decoding with a scripted fake Transcriber: windows, fallback, silence, prompts, offsets."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from specscribe.models.types import DecodeRequest, EncodedAudio, Segment, SpecStats, WindowResult, Word
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.longform import LongformOptions, compression_ratio, transcribe_audio
from specscribe.pipeline.windows import Window, plan_windows

SR = SAMPLE_RATE


def s(seconds: float) -> int:
    return int(round(seconds * SR))


# --- window planning --------------------------------------------------------------------------
def test_plan_windows_packs_chunks_up_to_30s():
    chunks = [(s(0), s(10)), (s(11), s(20)), (s(21), s(29)), (s(30), s(40))]
    windows = plan_windows(chunks, s(60))
    assert windows == [Window(s(0), s(29)), Window(s(30), s(40))]
    assert all(w.duration <= 30.0 for w in windows)


def test_plan_windows_splits_at_long_silence_and_cuts_long_chunks():
    chunks = [(s(0), s(5)), (s(15), s(20)), (s(25), s(95))]
    windows = plan_windows(chunks, s(100), max_gap=4.0)
    assert windows[0] == Window(s(0), s(5))  # 10 s of silence: not decoded
    assert windows[1] == Window(s(15), s(20))
    rest = windows[2:]
    assert [w.duration for w in rest] == [30.0, 30.0, 10.0]
    assert rest[0].start == s(25) and rest[-1].end == s(95)


def test_plan_windows_overlapping_chunks_and_bounds():
    windows = plan_windows([(-100, s(3)), (s(2), s(4)), (s(50), s(70))], s(60))
    assert windows[0].start == 0 and windows[-1].end == s(60)
    assert all(a.end <= b.start for a, b in zip(windows, windows[1:]))
    assert plan_windows([], s(10)) == []


# --- a scripted engine ---------------------------------------------------------------------------
@dataclass
class Script:
    """What the fake returns for (window number, task, temperature)."""

    text: str = " hello there."
    segments: tuple[tuple[float, float, str], ...] = ((0.0, 2.0, " hello there."),)
    avg_logprob: float = -0.2
    no_speech_prob: float = 0.01


@dataclass
class FakeTranscriber:
    scripts: dict = field(default_factory=dict)  # (window, task, temperature) -> Script; default Script()
    name: str = "fake"
    model_name: str = "fake"
    is_multilingual: bool = True
    encodes: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    detects: int = 0
    aligned: int = 0

    def encode(self, audio: np.ndarray) -> EncodedAudio:
        # the window's identity is the constant value the test wrote into its samples
        self.encodes.append(len(audio) / SR)
        return EncodedAudio(duration=len(audio) / SR, handle=int(round(float(audio[0]) * 100)))

    def detect_language(self, encoded):
        self.detects += 1
        return "de", 0.9

    def decode(self, encoded, request: DecodeRequest) -> WindowResult:
        self.requests.append((encoded.handle, request))
        script = self.scripts.get((encoded.handle, request.task, request.temperature))
        script = script or self.scripts.get((encoded.handle, request.task)) or Script()
        segs = tuple(Segment(a, b, t, tokens=tuple(range(len(t.split())))) for a, b, t in script.segments)
        tokens = tuple(100 + i for i in range(len(script.text.split())))
        return WindowResult(
            tokens=tokens, text=script.text, segments=segs, language=request.language or "de",
            avg_logprob=script.avg_logprob, no_speech_prob=script.no_speech_prob,
            temperature=request.temperature, stats=SpecStats(target_passes=2, tokens=len(tokens) + 1),
        )

    def align_words(self, encoded, result):
        self.aligned += 1
        return tuple(
            Segment(seg.start, seg.end, seg.text, seg.tokens,
                    tuple(Word(seg.start + i * 0.5, seg.start + (i + 1) * 0.5, " " + w) for i, w in enumerate(seg.text.split())))
            for seg in result.segments
        )

    def encode_text(self, text):
        return tuple(range(len(text.split())))

    def decode_tokens(self, tokens):
        return ""

    def decode_loop(self):
        from specscribe.models.engines import SequentialDecodeLoop

        return SequentialDecodeLoop(self)


def make_audio(spans, total):
    """Audio whose samples in span k hold the value k/100 (k = 1, 2, ...): the fake reads it back."""
    audio = np.zeros(s(total), dtype=np.float32)
    for k, (a, b) in enumerate(spans, 1):
        audio[s(a) : s(b)] = k / 100
    return audio


def detector(spans):
    return lambda audio: [(s(a), s(b)) for a, b in spans]


def run(fake, spans, total, **opts):
    # most scripts here end a decode a second or more before its window's end; the decode of the
    # rest has its own tests (test_early_end_*, test_a_clause_cut_*, test_the_rest_*, test_the_vad_pad_*),
    # the others keep it out of the way
    opts.setdefault("min_remainder_speech", 3.0)
    return transcribe_audio(fake, make_audio(spans, total), LongformOptions(**opts), detect_speech=detector(spans))


# --- behaviour ---------------------------------------------------------------------------------------
def test_absolute_timestamps_across_windows():
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" a b.", ((0.0, 1.5, " a"), (1.5, 3.0, " b."))),
        (2, "transcribe"): Script(" c.", ((0.5, 2.0, " c."),)),
    })
    tr = run(fake, [(2.0, 5.0), (40.0, 43.0)], 50.0)
    assert [(x.start, x.end, x.text) for x in tr.segments] == [(2.0, 3.5, " a"), (3.5, 5.0, " b."), (40.5, 42.0, " c.")]
    assert tr.text == "a b. c."
    assert tr.duration == 50.0 and len(fake.encodes) == 2


def test_timestamps_never_go_backwards_and_stay_in_window():
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" x y z", ((0.0, 4.0, " x"), (1.0, 2.0, " y"), (3.0, 9.0, " z"))),
    })
    tr = run(fake, [(10.0, 15.0)], 20.0)
    times = [t for seg in tr.segments for t in (seg.start, seg.end)]
    assert times == sorted(times)
    assert tr.segments[-1].end <= 15.0 and tr.segments[0].start >= 10.0


def test_temperature_fallback_on_repetition_then_kept():
    loop = " the the the the the the the the the the the the the the the the the the the the"
    assert compression_ratio(loop) > 2.4
    fake = FakeTranscriber(scripts={
        (1, "transcribe", 0.0): Script(loop, ((0.0, 5.0, loop),)),
        (1, "transcribe", 0.2): Script(" good text.", ((0.0, 5.0, " good text."),)),
    })
    tr = run(fake, [(0.0, 6.0)], 6.0)
    assert [r.temperature for _, r in fake.requests] == [0.0, 0.2]
    assert fake.requests[1][1].seed is not None
    assert tr.text == "good text."
    info = tr.windows[0]
    assert info.attempts == 2 and info.temperature == 0.2
    assert tr.stats.target_passes == 4  # both decodes counted


def test_fallback_on_low_logprob_all_fail_keeps_best():
    scripts = {(1, "transcribe", t): Script(f" try {t}", ((0.0, 1.0, f" try {t}"),), avg_logprob=-1.5 - t)
               for t in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)}
    fake = FakeTranscriber(scripts=scripts)
    tr = run(fake, [(0.0, 3.0)], 3.0)
    assert len(fake.requests) == 6
    assert tr.text == "try 0.0"  # highest avg_logprob


def test_no_speech_window_is_skipped_without_fallback():
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" Thank you.", ((0.0, 1.0, " Thank you."),), avg_logprob=-1.3, no_speech_prob=0.9),
    })
    tr = run(fake, [(0.0, 3.0)], 3.0)
    assert tr.segments == () and tr.text == ""
    assert len(fake.requests) == 1 and tr.windows[0].skipped


def test_pure_silence_decodes_nothing():
    fake = FakeTranscriber()
    tr = run(fake, [], 10.0)
    assert fake.encodes == [] and fake.requests == [] and tr.segments == ()
    assert tr.language is None


def test_prompt_conditioning_and_reset_after_high_temperature():
    loop = " la" * 40
    bad = {t: Script(loop, ((0.0, 2.0, loop),)) for t in (0.0, 0.2, 0.4)}
    scripts = {(2, "transcribe", t): v for t, v in bad.items()}
    scripts[(2, "transcribe", 0.6)] = Script(" ok now.", ((0.0, 2.0, " ok now."),))
    fake = FakeTranscriber(scripts=scripts)
    run(fake, [(0.0, 3.0), (10.0, 13.0), (20.0, 23.0)], 25.0)
    by_window = {}
    for handle, req in fake.requests:
        by_window.setdefault(handle, []).append(req)
    assert by_window[1][0].prompt_tokens == ()
    assert by_window[2][0].prompt_tokens == (100, 101)  # window 1's tokens
    assert by_window[3][0].prompt_tokens == ()  # reset: window 2 needed temperature 0.6 > 0.5


def test_language_detected_once_on_first_speech_window():
    fake = FakeTranscriber()
    tr = run(fake, [(0.0, 3.0), (10.0, 13.0)], 15.0)
    assert fake.detects == 1 and tr.language == "de"
    assert all(req.language == "de" for _, req in fake.requests)
    fake2 = FakeTranscriber()
    tr2 = run(fake2, [(0.0, 3.0)], 5.0, language="fr")
    assert fake2.detects == 0 and tr2.language == "fr" and tr2.language_probability == 1.0


def test_task_both_one_encoding_two_decodes():
    fake = FakeTranscriber(scripts={(1, "translate"): Script(" hello.", ((0.0, 2.0, " hello."),)),
                                    (1, "transcribe"): Script(" hallo.", ((0.0, 2.0, " hallo."),))})
    tr = run(fake, [(5.0, 8.0)], 10.0, task="both")
    assert len(fake.encodes) == 1
    assert sorted(req.task for _, req in fake.requests) == ["transcribe", "translate"]
    assert tr.text == "hallo." and tr.translation[0].text == " hello." and tr.translation[0].start == 5.0


def test_word_timestamps_shifted_inside_segments():
    fake = FakeTranscriber(scripts={(1, "transcribe"): Script(" one two", ((0.0, 1.0, " one two"),))})
    tr = run(fake, [(30.0, 33.0)], 40.0, word_timestamps=True)
    seg = tr.segments[0]
    assert fake.aligned == 1
    assert [(w.start, w.end) for w in seg.words] == [(30.0, 30.5), (30.5, 31.0)]
    assert seg.start <= seg.words[0].start and seg.words[-1].end <= seg.end


def test_word_timestamps_keep_each_segments_language_and_alternatives():
    """Aligning words rebuilds the segments from the decode's; the per-window language (--multilingual) and the
    n-best spans (--n-best) are added to the aligned segments, not lost with the unaligned ones."""
    from dataclasses import replace

    from specscribe.models.types import Alternative

    class NBest(FakeTranscriber):
        def decode(self, encoded, request):
            result = super().decode(encoded, request)
            best = tuple(t for seg in result.segments for t in seg.tokens)
            return replace(result, alternatives=(Alternative(" one two", best, -0.1), Alternative(" one too", best[:1] + (9,), -0.9)))

        def decode_tokens(self, tokens):
            return " ".join(str(t) for t in tokens)

    fake = NBest(scripts={(1, "transcribe"): Script(" one two", ((0.0, 1.0, " one two"),))})
    fake.detect_language = lambda encoded: ("en", 0.9)
    tr = run(fake, [(30.0, 33.0)], 40.0, word_timestamps=True, multilingual=True)
    seg = tr.segments[0]
    assert fake.aligned == 1 and [w.text for w in seg.words] == [" one", " two"]
    assert seg.language == "en"
    assert [a.tokens for a in seg.alternatives] == [(0, 1), (0, 9)]


def test_with_both_tasks_each_task_continues_from_where_it_stopped():
    """--task both: the rest of a window was decided by the transcript alone, so a translation that stopped early
    was never continued, and one that had gone further than the transcript repeated seconds in the rest. Each
    task's rest now starts where that task's decode stopped."""
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" a.", ((0.0, 20.0, " T0-20"),)),
        (1, "translate"): Script(" x.", ((0.0, 20.0, " X0-20"), (20.0, 26.0, " X20-26"))),
        (2, "transcribe"): Script(" b.", ((0.0, 9.5, " T-rest"),)),
        (2, "translate"): Script(" y.", ((0.0, 3.5, " X-rest"),)),
    })
    tr = run(fake, [(0.0, 20.0), (20.0, 30.0)], 30.0, task="both", min_remainder_speech=1.0)
    assert fake.encodes == [30.0, 10.0, 4.0]  # the window, the transcript's rest (20 s on), the translation's (26 s on)
    assert [(x.start, x.end, x.text) for x in tr.segments] == [(0.0, 20.0, " T0-20"), (20.0, 29.5, " T-rest")]
    assert [(x.start, x.end, x.text) for x in tr.translation] == [
        (0.0, 20.0, " X0-20"), (20.0, 26.0, " X20-26"), (26.0, 29.5, " X-rest")]
    only_translated = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" a.", ((0.0, 29.5, " T0-29.5"),)),
        (1, "translate"): Script(" x.", ((0.0, 15.0, " X0-15"),)),
    })
    tr = run(only_translated, [(0.0, 30.0)], 30.0, task="both", min_remainder_speech=1.0)
    assert [req.task for _, req in only_translated.requests] == ["transcribe", "translate", "translate"]
    assert [(x.start, x.end) for x in tr.translation] == [(0.0, 15.0), (15.0, 30.0)]  # the rest translated too


def test_early_end_of_window_decodes_the_rest_again():
    # the first decode covers only 0-4 s of a 25 s speech window; the rest is re-encoded at its real offset
    fake = FakeTranscriber(scripts={(1, "transcribe"): Script(" start.", ((0.0, 4.0, " start."),))})
    tr = run(fake, [(0.0, 25.0)], 25.0)
    assert fake.encodes[:2] == [25.0, 21.0]
    assert tr.segments[1].start == pytest.approx(4.0)
    times = [t for seg in tr.segments for t in (seg.start, seg.end)]
    assert times == sorted(times)


def test_multilingual_conditioning_restarts_where_the_language_changes():
    """With --multilingual, text in one language is no prompt for a window in another (it pulls the decode
    into that language: German heard as English words), but it is for the next window in its own."""
    fake = FakeTranscriber()
    languages = {1: "en", 2: "de", 3: "de", 4: "en"}
    fake.detect_language = lambda encoded: (languages[encoded.handle], 0.9)
    tr = run(fake, [(0.0, 3.0), (10.0, 13.0), (20.0, 23.0), (30.0, 33.0)], 35.0, multilingual=True)
    prompts = {handle: req.prompt_tokens for handle, req in fake.requests}
    assert [req.language for _, req in fake.requests] == ["en", "de", "de", "en"]
    assert prompts == {1: (), 2: (), 3: (100, 101), 4: ()}
    assert [seg.language for seg in tr.segments] == ["en", "de", "de", "en"]
    same = FakeTranscriber()  # one language throughout: every window conditioned on the text before it
    run(same, [(0.0, 3.0), (10.0, 13.0), (20.0, 23.0)], 25.0, multilingual=True)
    assert [req.prompt_tokens for _, req in same.requests] == [(), (100, 101), (100, 101, 100, 101)]


def test_a_clause_cut_at_the_window_end_starts_the_lanes_next_window():
    # Whisper stopped at 18.5 s of a 20 s window: the 1.5 s rest joins the next window (one encoding
    # fewer than a decode of its own), conditioned on the text before it
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" fifteen joules.", ((0.0, 18.5, " fifteen joules."),)),
        (2, "transcribe"): Script(" fall, then.", ((0.0, 1.5, " fall,"), (2.0, 21.5, " then."))),
    })
    audio = make_audio([(0.0, 18.5), (18.5, 20.0), (20.5, 40.0)], 40.0)  # value 2 marks the rest's audio
    tr = transcribe_audio(fake, audio, LongformOptions(), detect_speech=detector([(0.0, 20.0), (20.5, 40.0)]))
    assert fake.encodes == [20.0, 21.5]
    assert [(x.start, x.text) for x in tr.segments] == [(0.0, " fifteen joules."), (18.5, " fall,"), (20.5, " then.")]
    assert dict(fake.requests)[2].prompt_tokens == (100, 101)


def test_the_rest_of_a_lanes_last_window_is_decoded_on_its_own():
    fake = FakeTranscriber(scripts={
        (1, "transcribe"): Script(" fifteen joules.", ((0.0, 18.5, " fifteen joules."),)),
        (2, "transcribe"): Script(" fall,", ((0.0, 1.5, " fall,"),)),
        (3, "transcribe"): Script(" then.", ((0.0, 19.5, " then."),)),
    })
    audio = make_audio([(0.0, 18.5), (18.5, 20.0), (20.5, 40.0)], 40.0)
    tr = transcribe_audio(fake, audio, LongformOptions(), detect_speech=detector([(0.0, 20.0), (20.5, 40.0)]), lanes=2)
    assert sorted(fake.encodes) == [1.5, 19.5, 20.0]
    assert [(x.start, x.text) for x in tr.segments] == [(0.0, " fifteen joules."), (18.5, " fall,"), (20.5, " then.")]


def test_the_vad_pad_after_the_last_segment_is_not_decoded_again():
    fake = FakeTranscriber()  # covers 0-2 s of a 2.8 s window: 0.8 s left, less than min_remainder_speech
    tr = transcribe_audio(fake, make_audio([(0.0, 2.8)], 5.0), LongformOptions(), detect_speech=detector([(0.0, 2.8)]))
    assert fake.encodes == [2.8] and len(tr.segments) == 1


def test_progress_reaches_duration():
    seen = []
    fake = FakeTranscriber()
    transcribe_audio(fake, make_audio([(0.0, 2.0)], 9.0), LongformOptions(), detect_speech=detector([(0.0, 2.0)]),
                     on_progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 9.0


# --- lanes -----------------------------------------------------------------------------------------
SIX = [(0.0, 2.5), (10.0, 12.5), (20.0, 22.5), (30.0, 32.5), (40.0, 42.5), (50.0, 52.5)]  # each fully covered


def test_lanes_restart_conditioning_at_each_stretch_and_keep_time_order():
    fake = FakeTranscriber()
    tr = transcribe_audio(fake, make_audio(SIX, 55.0), LongformOptions(), detect_speech=detector(SIX), lanes=3)
    prompts = {handle: req.prompt_tokens for handle, req in fake.requests}
    assert [prompts[h] == () for h in range(1, 7)] == [True, False, True, False, True, False]
    assert [seg.start for seg in tr.segments] == [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]
    assert [w.index for w in tr.windows] == [0, 1, 2, 3, 4, 5]
    assert fake.detects == 1 and len(fake.encodes) == 6  # the detection's encoding is reused


def test_lane_layout_decides_the_text_width_does_not():
    runs = []
    for width in (1, 2, 3):
        fake = FakeTranscriber()
        tr = transcribe_audio(fake, make_audio(SIX, 55.0), LongformOptions(), detect_speech=detector(SIX),
                              lanes=3, width=width)
        runs.append((tr.segments, sorted((h, r.prompt_tokens) for h, r in fake.requests)))
    assert runs[0] == runs[1] == runs[2]


def test_lanes_run_side_by_side():
    fake = FakeTranscriber()
    transcribe_audio(fake, make_audio(SIX, 55.0), LongformOptions(), detect_speech=detector(SIX), lanes=2, width=2)
    order = [handle for handle, _ in fake.requests]
    assert order[:2] == [1, 4]  # both lanes' first windows before either lane's second


def test_a_failing_lane_fails_the_file():
    class Broken(FakeTranscriber):
        def align_words(self, encoded, result):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        transcribe_audio(Broken(), make_audio(SIX, 55.0), LongformOptions(word_timestamps=True),
                         detect_speech=detector(SIX), lanes=2)
