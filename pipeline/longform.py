"""Transcribe a whole recording through any Transcriber: VAD windows, fallback, conditioning.

For each window (pipeline/windows.py) the audio is encoded ONCE; every decode of that window
(transcribe, translate, each fallback temperature) and the word alignment reuse the encoding.

Guards, as in openai/whisper and faster-whisper:
- temperature fallback (0.0, 0.2, ... 1.0) while the compression ratio > 2.4 (repetition) or
  avg_logprob < -1.0; if every temperature fails, the best result by avg_logprob among those
  under the compression threshold is kept;
- no speech: no_speech_prob > 0.6 and avg_logprob < -1.0 => the window is silence, skipped;
- conditioning: the previous windows' text is the next prompt, but it is reset after a decode
  that needed a temperature above 0.5, which breaks repetition loops;
- timestamps: window-relative times + the window's offset, clamped into the window, and made
  monotonic (never going backwards) across segments, words and windows.
"""

from __future__ import annotations

import collections
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Sequence

import numpy as np

from specscribe.models.engines import Transcriber
from specscribe.models.types import DecodeRequest, EncodedAudio, Segment, SpecStats, Task, WindowResult, Word
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.windows import SpeechDetector, Window, plan_windows, silero_speech

TaskChoice = Literal["transcribe", "translate", "both"]
ProgressFn = Callable[[float], None]  # seconds of the file done so far


@dataclass(frozen=True)
class LongformOptions:
    """How to decode a long recording.

    Attributes:
        language: ISO code, or None to detect it once per file on the first speech window.
        task: "transcribe", "translate" (to English) or "both" (one encoding, two decodes).
        word_timestamps: align words (one extra pass per window and task).
        temperatures: fallback schedule; the first is used unless a guard fails.
        compression_ratio_threshold: gzip ratio above which a decode counts as repetitive.
        logprob_threshold: avg_logprob below which a decode counts as failed.
        no_speech_threshold: no_speech_prob above which (with a low avg_logprob) a window is silence.
        condition_on_previous_text: prompt each window with the previous windows' text.
        prompt_reset_on_temperature: reset the prompt after a decode at a temperature above this.
        initial_prompt: text placed before the first window's prompt.
        max_window: seconds per window (Whisper: 30).
        max_gap: seconds of silence still kept inside one window.
        seed: base seed for sampling at temperature > 0 (per window + attempt), for reproducibility.
        min_remainder_speech: seconds of VAD speech left after a decode's last segment that make
            the rest of the window decode again (Whisper stopped early).
    """

    language: str | None = None
    task: TaskChoice = "transcribe"
    word_timestamps: bool = False
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | None = None
    max_window: float = 30.0
    max_gap: float = 4.0
    seed: int = 0
    min_remainder_speech: float = 3.0


@dataclass(frozen=True)
class WindowInfo:
    """What happened to one window and one task.

    Attributes:
        index: window number in the file.
        start, end: absolute seconds of the window.
        task: "transcribe" or "translate".
        temperature: temperature of the kept decode.
        attempts: decodes run (1 + fallbacks).
        skipped: the window was judged silence (no segments kept).
        avg_logprob, no_speech_prob, compression_ratio: of the kept decode.
        stats: SpecStats summed over all its decodes.
    """

    index: int
    start: float
    end: float
    task: Task
    temperature: float
    attempts: int
    skipped: bool
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    stats: SpecStats

    def to_dict(self) -> dict:
        return {
            "index": self.index, "start": round(self.start, 3), "end": round(self.end, 3),
            "task": self.task, "temperature": self.temperature, "attempts": self.attempts,
            "skipped": self.skipped, "avg_logprob": round(self.avg_logprob, 4),
            "no_speech_prob": round(self.no_speech_prob, 4),
            "compression_ratio": round(self.compression_ratio, 3), "stats": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class Timing:
    """Wall seconds spent per stage for one file.

    Attributes:
        vad, encode, decode, align: stage totals.
        total: the whole transcribe_audio call.
    """

    vad: float = 0.0
    encode: float = 0.0
    decode: float = 0.0
    align: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class Transcript:
    """The result for one file.

    Attributes:
        path: the input as given ("-" for stdin).
        language: language used (given or detected); None when the file had no speech.
        language_probability: detection probability (1.0 when given).
        duration: seconds of audio.
        segments: absolute-time segments of the main task (the translation when task=translate).
        translation: English segments when task="both", else None.
        stats: SpecStats summed over every decode of the file.
        windows: per-window, per-task breakdown.
        timing: wall time per stage.
        task: the task asked for.
    """

    path: str
    language: str | None
    language_probability: float
    duration: float
    segments: tuple[Segment, ...]
    translation: tuple[Segment, ...] | None = None
    stats: SpecStats = field(default_factory=SpecStats)
    windows: tuple[WindowInfo, ...] = ()
    timing: Timing = field(default_factory=Timing)
    task: TaskChoice = "transcribe"

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()


def compression_ratio(text: str) -> float:
    """gzip compression ratio of the UTF-8 text; high values mean repetition."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass(frozen=True)
class _Kept:
    result: WindowResult
    attempts: int
    stats: SpecStats
    temperature: float  # for the prompt reset: the last temperature tried when all failed
    ratio: float


def decode_with_fallback(
    transcriber: Transcriber, encoded: EncodedAudio, request: DecodeRequest, options: LongformOptions, seed: int
) -> _Kept:
    """Decode at rising temperatures until the compression and log-prob guards pass."""
    tried: list[tuple[WindowResult, float]] = []
    stats = SpecStats()
    for i, temperature in enumerate(options.temperatures):
        req = replace(request, temperature=temperature, seed=seed + i if temperature > 0 else None)
        result = transcriber.decode(encoded, req)
        stats = stats + result.stats
        ratio = compression_ratio(result.text.strip())
        tried.append((result, ratio))
        failed = ratio > options.compression_ratio_threshold or result.avg_logprob < options.logprob_threshold
        silence = (
            result.no_speech_prob > options.no_speech_threshold and result.avg_logprob < options.logprob_threshold
        )
        if not failed or silence:
            return _Kept(result, i + 1, stats, temperature, ratio)
    under = [t for t in tried if t[1] <= options.compression_ratio_threshold] or tried
    best, ratio = max(under, key=lambda t: t[0].avg_logprob)
    return _Kept(best, len(tried), stats, options.temperatures[-1], ratio)


def _shift(segments: Sequence[Segment], offset: float, limit: float, floor: float) -> tuple[tuple[Segment, ...], float]:
    """Window-relative -> absolute seconds, clamped into [floor, offset + limit] and monotonic:
    words never go backwards, each segment covers its words, and starts after the previous one ends.
    Returns (segments, new floor)."""
    cap = offset + limit

    def clamp(t: float, lo: float) -> float:
        return min(max(t, lo), cap)

    out = []
    for seg in segments:
        words: list[Word] = []
        word_floor = floor
        for w in seg.words:
            ws = clamp(offset + w.start, word_floor)
            we = clamp(offset + w.end, ws)
            words.append(Word(round(ws, 3), round(we, 3), w.text, w.probability))
            word_floor = we
        start = clamp(offset + seg.start, floor)
        if words:
            start = min(start, words[0].start)
        end = clamp(max(offset + seg.end, words[-1].end if words else start), start)
        out.append(Segment(round(start, 3), round(end, 3), seg.text, seg.tokens, tuple(words)))
        floor = end
    return tuple(out), floor


def _remainder(
    window: Window, covered: float, chunks: Sequence[tuple[int, int]], min_speech: float
) -> Window | None:
    """The part of the window after the decode's last segment, if the VAD heard enough speech there.

    Whisper sometimes ends a window early (end-of-text after a timestamp) although speech goes
    on; faster-whisper then skips the rest of the window. Here the rest is encoded and decoded
    again as a window of its own. covered: window-relative end of the last segment (seconds).
    """
    cut = window.start + int(round(covered * SAMPLE_RATE))
    if covered < 1.0 or cut >= window.end:  # no progress: never loop
        return None
    speech = sum(max(0, min(e, window.end) - max(s, cut)) for s, e in chunks) / SAMPLE_RATE
    if speech < min_speech:
        return None
    return Window(cut, window.end, remainder=True)


def transcribe_audio(
    transcriber: Transcriber,
    audio: np.ndarray,
    options: LongformOptions = LongformOptions(),
    *,
    path: str = "",
    detect_speech: SpeechDetector | None = None,
    on_progress: ProgressFn | None = None,
) -> Transcript:
    """Transcribe float32 mono 16 kHz audio of any length. See the module docstring."""
    t0 = time.perf_counter()
    detect_speech = detect_speech or silero_speech(max_chunk=options.max_window)
    duration = len(audio) / SAMPLE_RATE
    chunks = detect_speech(audio)
    windows = plan_windows(chunks, len(audio), options.max_window, options.max_gap)
    t_vad = time.perf_counter() - t0
    tasks: tuple[Task, ...] = ("transcribe", "translate") if options.task == "both" else (options.task,)
    main_task: Task = "translate" if options.task == "translate" else "transcribe"

    language, language_probability = options.language, 1.0
    history: dict[Task, list[int]] = {task: [] for task in tasks}
    if options.initial_prompt:
        for task in tasks:
            history[task] = list(transcriber.encode_text(" " + options.initial_prompt.strip()))
    reset_at: dict[Task, int] = {task: 0 for task in tasks}
    floors: dict[Task, float] = {task: 0.0 for task in tasks}
    out: dict[Task, list[Segment]] = {task: [] for task in tasks}
    infos: list[WindowInfo] = []
    stats = SpecStats()
    t_enc = t_dec = t_align = 0.0

    queue = collections.deque(windows)
    index = -1
    while queue:
        window = queue.popleft()
        index += 1
        ts = time.perf_counter()
        encoded = transcriber.encode(audio[window.start : window.end])
        t_enc += time.perf_counter() - ts
        if language is None:
            language, language_probability = transcriber.detect_language(encoded)
        for task in tasks:
            prompt: tuple[int, ...] = ()
            if options.condition_on_previous_text or index == 0:
                prompt = tuple(history[task][reset_at[task] :][-223:])  # 448 // 2 - 1, like Whisper
            request = DecodeRequest(task=task, language=language, prompt_tokens=prompt)
            ts = time.perf_counter()
            kept = decode_with_fallback(transcriber, encoded, request, options, options.seed + 1000 * index)
            t_dec += time.perf_counter() - ts
            stats = stats + kept.stats
            result = kept.result
            skipped = (
                result.no_speech_prob > options.no_speech_threshold
                and result.avg_logprob < options.logprob_threshold
            )
            infos.append(
                WindowInfo(index, window.offset, window.offset + window.duration, task, kept.result.temperature,
                           kept.attempts, skipped, result.avg_logprob, result.no_speech_prob, kept.ratio, kept.stats)
            )
            if skipped or not result.segments:
                continue
            segments = result.segments
            if options.word_timestamps and task == main_task:
                ts = time.perf_counter()
                segments = transcriber.align_words(encoded, result)
                t_align += time.perf_counter() - ts
            before = floors[task]
            shifted, floors[task] = _shift(segments, window.offset, window.duration, floors[task])
            # a re-decoded remainder may repeat what the other task already covered
            out[task].extend(s for s in shifted if s.text.strip() and (s.end > before or not window.remainder))
            history[task].extend(result.tokens)  # with timestamp tokens, as Whisper conditions
            if kept.temperature > options.prompt_reset_on_temperature:
                reset_at[task] = len(history[task])
            if task == main_task:
                rest = _remainder(window, result.segments[-1].end, chunks, options.min_remainder_speech)
                if rest is not None:
                    queue.appendleft(rest)
        if on_progress is not None:
            on_progress(window.offset + window.duration)
    if on_progress is not None:
        on_progress(duration)

    timing = Timing(t_vad, t_enc, t_dec, t_align, time.perf_counter() - t0)
    return Transcript(
        path=path,
        language=language,
        language_probability=language_probability if language else 0.0,
        duration=duration,
        segments=tuple(out[main_task]),
        translation=tuple(out["translate"]) if options.task == "both" else None,
        stats=stats,
        windows=tuple(infos),
        timing=timing,
        task=options.task,
    )
