"""Transcribe a whole recording through any Transcriber: VAD windows, fallback, conditioning.

For each window (pipeline/windows.py) the audio is encoded ONCE; every decode of that window
(transcribe, translate, each fallback temperature) and the word alignment reuse the encoding.

Guards, as in openai/whisper and faster-whisper:
- temperature fallback (0.0, 0.2, ... 1.0) while the compression ratio > 2.4 (repetition) or
  avg_logprob < -1.0; if every temperature fails, the best result by avg_logprob among those
  under the compression threshold is kept;
- no speech: no_speech_prob > 0.6 and avg_logprob < -1.0 => the window is silence, skipped;
- conditioning: the previous windows' text is the next prompt, but it is reset after a decode
  that needed a temperature above 0.5, which breaks repetition loops, and (``multilingual``) where
  a window's language differs from that text's, which would pull the decode into it;
- timestamps: window-relative times + the window's offset, clamped into the window, and made
  monotonic (never going backwards) across segments, words and windows;
- beam search, best-of sampling and hotwords go into every window's request; with ``n_best`` each
  segment carries its span of the window's n-best hypotheses (pipeline/alternatives.py); with
  ``multilingual`` every window detects its own language (its segments carry it), else the first
  speech window decides for the file.

Lanes (pipeline/lanes.py): a file's windows can be cut into consecutive stretches, each decoded
in order and conditioned on its own previous text (``lane_program``); the lanes of a file, and
of many files, run at once and share the engine's passes. With one lane per file this is
Whisper's sequential decode; with more, conditioning restarts at each stretch (N - 1 seams).
"""

from __future__ import annotations

import collections
import time
import zlib
from dataclasses import dataclass, replace
from typing import Callable, Generator, Sequence

import numpy as np

from specscribe.models.engines import Transcriber
from specscribe.models.types import DecodeRequest, EncodedAudio, Segment, SpecStats, Task, WindowResult, Word
from specscribe.pipeline.alternatives import with_alternatives
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.lanes import DecodeCall, LaneRunner, idle_work
from specscribe.pipeline.transcript import LongformOptions, TaskChoice, Timing, Transcript, WindowInfo
from specscribe.pipeline.windows import SpeechDetector, Window, plan_windows, silero_speech

__all__ = ["LongformOptions", "TaskChoice", "Timing", "Transcript", "WindowInfo", "transcribe_audio"]

ProgressFn = Callable[[float], None]  # seconds of the file done so far


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


def fallback_program(
    encoded: EncodedAudio, request: DecodeRequest, options: LongformOptions, seed: int
) -> Generator[DecodeCall, WindowResult, _Kept]:
    """Decode at rising temperatures until the compression and log-prob guards pass (a lane's
    sub-program: each decode is yielded to the lane's runner)."""
    tried: list[tuple[WindowResult, float]] = []
    stats = SpecStats()
    for i, temperature in enumerate(options.temperatures):
        req = replace(request, temperature=temperature, seed=seed + i if temperature > 0 else None)
        result = yield DecodeCall(encoded, req)
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
        out.append(replace(seg, start=round(start, 3), end=round(end, 3), words=tuple(words)))
        floor = end
    return tuple(out), floor


def _remainder(
    window: Window, covered: float, chunks: Sequence[tuple[int, int]], min_speech: float
) -> Window | None:
    """The part of the window after the decode's last segment, if the VAD heard enough speech there.

    Whisper sometimes ends a window early (end-of-text after a timestamp) although speech goes
    on, most often when a clause ends within a second or two of the window's end; faster-whisper
    then skips the rest of the window. Here the rest is decoded again (``_queue_rests``).
    covered: window-relative end of the last segment (seconds).
    """
    cut = window.start + int(round(covered * SAMPLE_RATE))
    if covered < 1.0 or cut >= window.end:  # no progress: never loop
        return None
    speech = sum(max(0, min(e, window.end) - max(s, cut)) for s, e in chunks) / SAMPLE_RATE
    if speech < min_speech:
        return None
    return Window(cut, window.end, remainder=True)


def _queue_rests(queue: collections.deque, index: int, depth: int, rests: dict[Task, Window], tasks: tuple[Task, ...],
                 options: LongformOptions) -> None:
    """Put a window's undecoded rests in the lane's queue: each task's from where that task's decode stopped
    (rests: task -> Window; tasks that stopped at the same sample share one). A rest of every task may become
    the start of the lane's next window, if that follows within ``max_gap`` and both fit in ``max_window``
    (Whisper's seek: no extra encoding, and the cut phrase is decoded with what follows it); otherwise, and
    always for the rest of some tasks only (the next window decodes every task from its start), it is
    decoded on its own, next."""
    by_start: dict[int, list] = {}
    for task in tasks:
        if task in rests:
            by_start.setdefault(rests[task].start, []).append(task)
    for start in sorted(by_start, reverse=True):  # appended left: the earliest is decoded first
        todo, rest = tuple(by_start[start]), rests[by_start[start][0]]
        if todo == tasks and queue:
            n_index, n_depth, after, _ = queue[0]
            fits = after.end - rest.start <= int(options.max_window * SAMPLE_RATE)
            if n_depth == 0 and fits and 0 <= after.start - rest.end <= int(options.max_gap * SAMPLE_RATE):
                queue[0] = (n_index, 0, Window(rest.start, after.end, remainder=True), tasks)
                continue
        queue.appendleft((index, depth + 1, rest, todo))


@dataclass(frozen=True)
class FilePlan:
    """A recording cut into windows, its language known, ready for its lanes.

    Attributes:
        chunks: VAD speech spans (samples).
        windows: decode windows in time order.
        language, language_probability: given, or detected once on the first window.
        first: the encoding of windows[0] made for detection (its lane reuses it), or None.
        vad, encode: seconds spent on VAD and on that first encoding.
    """

    chunks: tuple[tuple[int, int], ...]
    windows: tuple[Window, ...]
    language: str | None
    language_probability: float
    first: EncodedAudio | None = None
    vad: float = 0.0
    encode: float = 0.0


def plan_file(
    transcriber: Transcriber, audio: np.ndarray, options: LongformOptions, detect_speech: SpeechDetector | None = None
) -> FilePlan:
    """VAD, windows, and the language (detected once per file on the first speech window)."""
    t0 = time.perf_counter()
    detect_speech = detect_speech or silero_speech(max_chunk=options.max_window)
    chunks = tuple(detect_speech(audio))
    windows = tuple(plan_windows(chunks, len(audio), options.max_window, options.max_gap))
    t_vad = time.perf_counter() - t0
    language, probability, first, t_enc = options.language, 1.0, None, 0.0
    if language is None and windows:
        t1 = time.perf_counter()
        first = transcriber.encode(audio[windows[0].start : windows[0].end])
        t_enc = time.perf_counter() - t1
        language, probability = transcriber.detect_language(first)
    return FilePlan(chunks, windows, language, probability, first, t_vad, t_enc)


def split_lanes(windows: Sequence[Window], lanes: int) -> list[tuple[Window, ...]]:
    """Consecutive windows cut into at most ``lanes`` stretches of nearly equal count."""
    n = max(1, min(lanes, len(windows)))
    size, extra = divmod(len(windows), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (1 if k < extra else 0)
        if j > i:
            out.append(tuple(windows[i:j]))
        i = j
    return out


@dataclass(frozen=True)
class LaneOutput:
    """What one lane produced. Attributes: segments per task (absolute times), windows, stats,
    encode and align seconds."""

    segments: dict
    windows: tuple[WindowInfo, ...]
    stats: SpecStats
    encode: float
    align: float


def lane_program(
    transcriber: Transcriber,
    audio: np.ndarray,
    plan: FilePlan,
    windows: Sequence[Window],
    options: LongformOptions,
    on_window: Callable[[float], None] | None = None,
) -> Generator[DecodeCall, WindowResult, LaneOutput]:
    """Decode ``windows`` (a stretch of plan.windows) in order, each conditioned on the lane's
    previous text; a window that Whisper ended early has its rest decoded again, at the start of
    the lane's next window when it fits there (``_queue_rests``), else on its own right after it; with
    --task both, each task's rest from where that task stopped.
    on_window(seconds): the audio seconds a finished window covered (for progress)."""
    tasks: tuple[Task, ...] = ("transcribe", "translate") if options.task == "both" else (options.task,)
    main_task: Task = "translate" if options.task == "translate" else "transcribe"
    history: dict[Task, list[int]] = {task: [] for task in tasks}
    if options.initial_prompt:  # every lane starts from the initial prompt
        for task in tasks:
            history[task] = list(transcriber.encode_text(" " + options.initial_prompt.strip()))
    reset_at: dict[Task, int] = {task: 0 for task in tasks}
    text_language = plan.language  # the language of the transcribe history's text
    floors: dict[Task, float] = {task: windows[0].offset if windows else 0.0 for task in tasks}
    out: dict[Task, list[Segment]] = {task: [] for task in tasks}
    infos: list[WindowInfo] = []
    stats = SpecStats()
    t_enc = t_align = 0.0
    first_index = plan.windows.index(windows[0]) if windows else 0
    queue = collections.deque((first_index + i, 0, w, tasks) for i, w in enumerate(windows))
    reached = 0  # sample up to which windows have been decoded (progress)
    while queue:
        index, depth, window, todo = queue.popleft()  # todo: the tasks this window is decoded for
        if index == 0 and depth == 0 and plan.first is not None:
            encoded = plan.first
        else:
            ts = time.perf_counter()
            encoded = transcriber.encode(audio[window.start : window.end])
            t_enc += time.perf_counter() - ts
        language = plan.language
        if options.multilingual and not (index == 0 and depth == 0 and plan.first is not None):
            language, _ = transcriber.detect_language(encoded)  # mixed-language audio: per window
        if language != text_language and "transcribe" in tasks:
            # text in another language would pull this window's decode into it (German heard as English words)
            reset_at["transcribe"] = len(history["transcribe"])
        text_language = language
        rests: dict[Task, Window] = {}
        for task in todo:
            prompt: tuple[int, ...] = ()
            if options.condition_on_previous_text or (index, depth) == (first_index, 0):
                prompt = tuple(history[task][reset_at[task] :][-223:])  # 448 // 2 - 1, like Whisper
            request = options.decode_request(task, language, prompt)
            seed = options.seed + 1000 * index + 100 * depth
            kept = yield from fallback_program(encoded, request, options, seed)
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
            if options.word_timestamps and task == main_task:  # first: it rebuilds the segments from result's
                ts = time.perf_counter()
                segments = transcriber.align_words(encoded, result)
                t_align += time.perf_counter() - ts
            segments = with_alternatives(segments, result.alternatives, transcriber.decode_tokens)
            if options.multilingual:
                segments = tuple(replace(s, language=result.language) for s in segments)
            before = floors[task]
            shifted, floors[task] = _shift(segments, window.offset, window.duration, floors[task])
            # a re-decoded remainder may repeat what the other task already covered
            out[task].extend(s for s in shifted if s.text.strip() and (s.end > before or not window.remainder))
            history[task].extend(result.tokens)  # with timestamp tokens, as Whisper conditions
            if kept.temperature > options.prompt_reset_on_temperature:
                reset_at[task] = len(history[task])
            rest = _remainder(window, result.segments[-1].end, plan.chunks, options.min_remainder_speech)
            if rest is not None:
                rests[task] = rest
        _queue_rests(queue, index, depth, rests, tasks, options)
        if on_window is not None and depth == 0:
            on_window((window.end - max(window.start, reached)) / SAMPLE_RATE)  # a merged rest counted once
        reached = max(reached, window.end)
    return LaneOutput({t: tuple(v) for t, v in out.items()}, tuple(infos), stats, t_enc, t_align)


def merge_lanes(
    plan: FilePlan, outputs: Sequence[LaneOutput], options: LongformOptions, path: str, duration: float, total: float
) -> Transcript:
    """The lanes of one file (in time order) as its Transcript. total: the file's wall seconds."""
    main_task: Task = "translate" if options.task == "translate" else "transcribe"
    segments: dict[Task, list[Segment]] = {}
    stats = SpecStats()
    for lane in outputs:
        for task, segs in lane.segments.items():
            segments.setdefault(task, []).extend(segs)
        stats = stats + lane.stats
    encode = plan.encode + sum(o.encode for o in outputs)
    align = sum(o.align for o in outputs)
    timing = Timing(plan.vad, encode, max(0.0, total - plan.vad - encode - align), align, total)
    return Transcript(
        path=path,
        language=plan.language if plan.windows else None,
        language_probability=plan.language_probability if plan.windows and plan.language else 0.0,
        duration=duration,
        segments=tuple(segments.get(main_task, ())),
        translation=tuple(segments.get("translate", ())) if options.task == "both" else None,
        stats=stats,
        windows=tuple(sorted((i for o in outputs for i in o.windows), key=lambda i: (i.start, i.task))),
        timing=timing,
        task=options.task,
    )


def transcribe_audio(
    transcriber: Transcriber,
    audio: np.ndarray,
    options: LongformOptions = LongformOptions(),
    *,
    path: str = "",
    detect_speech: SpeechDetector | None = None,
    on_progress: ProgressFn | None = None,
    lanes: int = 1,
    width: int | None = None,
) -> Transcript:
    """Transcribe float32 mono 16 kHz audio of any length. See the module docstring.

    lanes: stretches the file is cut into, each conditioned on its own text (1: the whole file
    in order, as Whisper does). width: lanes decoding at once (default: all of them); the text
    depends on ``lanes`` only, never on ``width``.
    """
    t0 = time.perf_counter()
    plan = plan_file(transcriber, audio, options, detect_speech)
    duration = len(audio) / SAMPLE_RATE
    done = [0.0]

    def advance(seconds: float) -> None:
        done[0] += seconds
        if on_progress is not None:
            on_progress(min(done[0], duration))

    stretches = split_lanes(plan.windows, lanes)
    outputs: dict[int, LaneOutput] = {}
    errors: list[BaseException] = []
    runner = LaneRunner(transcriber.decode_loop(), width or max(1, len(stretches)), idle_work(transcriber))
    programs = ((i, lane_program(transcriber, audio, plan, w, options, advance)) for i, w in enumerate(stretches))
    runner.run(iter(programs), outputs.__setitem__, lambda key, exc: errors.append(exc))
    if errors:
        raise errors[0]
    if on_progress is not None:
        on_progress(duration)
    ordered = [outputs[i] for i in range(len(stretches))]
    return merge_lanes(plan, ordered, options, path, duration, time.perf_counter() - t0)
