"""The model work of a streaming session, as programs run on the scheduler's model thread.

Each job encodes its audio once, ``yield``s its decode (pipeline/scheduler.py batches the decodes
of every session into shared target passes) and returns a frozen result; nothing here touches
session state. ``run_alone`` (pipeline/scheduler.py) runs a job without a scheduler.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Generator

import numpy as np

from specscribe.models.engines import Transcriber
from specscribe.models.types import DecodeRequest, SpecStats, WindowResult, Word
from specscribe.pipeline.alternatives import split_words
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.lanes import DecodeCall
from specscribe.pipeline.language import restrict
from specscribe.pipeline.policy import LocalAgreementOptions
from specscribe.pipeline.transcript import LongformOptions
from specscribe.pipeline.vad import FRAME

# Whisper's own guards (openai/whisper transcribe.py defaults)
NO_SPEECH_THRESHOLD = 0.6
LOGPROB_THRESHOLD = -1.0
COMPRESSION_RATIO_THRESHOLD = 2.4
# a hypothesis that stopped early (transcribe_job, stopped_at)
STALL_SPEECH = LongformOptions.min_remainder_speech  # seconds of VAD speech after its last word (batch's rule)
LONGEST_WORD = 1.5  # seconds: a last word "lasting" longer was stretched over speech Whisper skipped
MIN_REST = 1.0  # seconds before and after the point where it stopped
# a word DTW started in a pause (speech_onsets)
ONSET_GAP = 0.3  # seconds without a VAD speech frame from a word's start: the start lies in a pause
ONSET_TAIL = 0.25  # seconds of speech before that gap, at most: the previous word's tail
ONSET_LEAD = 0.1  # seconds a moved start keeps before the VAD's first speech frame (Silero's onset comes late)
PROMPT_CHARS = LocalAgreementOptions.prompt_chars  # characters of text before the rest given as its prompt


@dataclass(frozen=True)
class Hypothesis:
    """One decode of a buffer.

    Attributes:
        words: words with absolute times (seconds), empty when the guards rejected the decode.
        tokens: generated token ids (the next update's previous-hypothesis draft).
        language: language decoded in.
        stats: speculative-decoding counters of this decode.
        rejected: why the guards dropped the text ("" when kept).
        alternatives: the other n-best hypotheses (request.n_best > 1) as words, ranked.
        language_probs: the detector's probabilities on this audio, when the job ran it (else empty).
        continued: the decode stopped early and the rest of the audio was decoded on its own (transcribe_job).
        retried: the decode looped and was decoded again with timestamp tokens, and a third time without its
            prompt if that looped too (transcribe_job).
    """

    words: tuple[Word, ...]
    tokens: tuple[int, ...]
    language: str
    stats: SpecStats
    rejected: str = ""
    alternatives: tuple[tuple[str, ...], ...] = ()
    language_probs: dict[str, float] = field(default_factory=dict)
    continued: bool = False
    retried: bool = False


@dataclass(frozen=True)
class Translation:
    """Attributes: text (English), tokens, stats (as in Hypothesis)."""

    text: str
    tokens: tuple[int, ...]
    stats: SpecStats


@dataclass(frozen=True)
class DecodeFixes:
    """Which of Whisper's live failures a transcribe_job mends (the StreamOptions switches of the same names).

    retry_loops: a decode that loops (the compression-ratio guard) is decoded again with timestamp tokens, and if
        that loops too and it had a prompt, once more without the prompt.
    continue_skipped: speech the hypothesis skipped is decoded again on its own (stopped_at).
    speech_onsets: a word DTW started in a pause starts where the VAD hears it (speech_onsets).
    The last two need the VAD's speech frames (transcribe_job's speech).
    """

    retry_loops: bool = True
    continue_skipped: bool = True
    speech_onsets: bool = True


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def max_tokens_for(seconds: float) -> int:
    """A cap on generated tokens for `seconds` of speech: ends repetition loops early."""
    return int(min(224, 16 + 10 * seconds))


def encoder_window(audio: np.ndarray, pad: float) -> float | None:
    """Seconds of encoder input for a streaming decode of audio (n,): the audio plus pad (None: 30 s)."""
    window = len(audio) / SAMPLE_RATE + pad
    return None if window >= 30.0 else window


def transcribe_job(
    audio: np.ndarray,  # (n,) float32, n <= 30 s
    offset: float,  # seconds of the first sample in the stream
    request: DecodeRequest,
    prompt: str,
    draft_text: str | None,
    encoder_pad: float = 30.0,
    detect: bool = False,
    allowed: tuple[str, ...] = (),
    speech: np.ndarray | None = None,  # (m,) seconds into audio of the VAD's speech frames (None: unknown)
    detect_from: float = 0.0,  # seconds into audio where the audio the detector hears starts
    fixes: DecodeFixes = DecodeFixes(),
) -> Callable[[Transcriber], Generator[DecodeCall, WindowResult, Hypothesis]]:
    """Encode once, decode (transcribe or translate), align words; shift times by offset.

    draft_text: when not None, the previous hypothesis as text, re-tokenized here (used after the
    buffer start moved, when the old token ids no longer start where the window does).
    encoder_pad: the encoder sees the audio plus this many seconds (30: the full window).
    detect: run the language detector on the audio (pipeline/language.py weighs it); a request
    without a language then decodes in the most likely of the ``allowed`` codes (all: empty).
    detect_from: the detector hears audio[detect_from:] only, in an encoder pass of its own when that is
    not all of it: the decode keeps the context before an utterance, which would pull the detection
    towards the language of the speech before it.
    fixes: which failures the job mends (DecodeFixes): a looping decode, skipped speech, early word starts.
    speech: where the VAD heard speech. When the hypothesis skipped speech (``stopped_at``: speech after
    its last word, or inside a word DTW stretched over seconds), the audio from there is decoded once
    more on its own, with the hypothesis before it as prompt, and the two are joined: Whisper sometimes
    ends a window after a few words ("Sure." for ten seconds of a conversation's next turns) and decodes
    the same window the same way at every update.
    """

    def job(tr: Transcriber) -> Generator[DecodeCall, WindowResult, Hypothesis]:
        req = _with_text(tr, request, prompt, draft_text)
        encoded = tr.encode(audio, encoder_window(audio, encoder_pad))
        probs: dict[str, float] = {}
        if detect or req.language is None:
            heard = encoded
            own = audio[int(detect_from * SAMPLE_RATE) :]  # (n - cut,) the utterance alone
            if 0 < own.size < audio.size:
                heard = tr.encode(own, encoder_window(own, encoder_pad))
            probs = tr.language_probabilities(heard, top=100)
            if req.language is None:
                kept = restrict(probs, allowed)
                req = _replace(req, language=max(kept, key=kept.get) if kept else None)
        result = yield DecodeCall(encoded, req)
        duration = len(audio) / SAMPLE_RATE
        rejected, words = _checked_words(tr, encoded, result, duration)
        stats, others, tokens = result.stats, (), tuple(result.tokens)
        retried = fixes.retry_loops and rejected == "repetition" and not req.timestamps
        # Whisper looped ("... for you, ask what you can do for you, ask what you can do for you, ..."): decoded
        # again on the same encoder output with timestamp tokens, which break most loops, then also without the
        # prompt, which can pull a decode into its own words
        retries = [_replace(req, timestamps=True, hypothesis_tokens=())] if retried else []
        if retries and req.prompt_tokens:
            retries.append(_replace(retries[0], prompt_tokens=()))
        for retry in retries:
            again = yield DecodeCall(encoded, retry)
            stats = stats + again.stats
            retry_rejected, retry_words = _checked_words(tr, encoded, again, duration)
            if not retry_rejected:
                rejected, words, result, tokens = "", retry_words, again, ()  # tokens: no draft for the next decode
                break
        skipped = stopped_at(words, duration, speech) if fixes.continue_skipped else None
        if skipped is not None:
            keep, stop = skipped
            rest = audio[int(stop * SAMPLE_RATE) :]  # (n - cut,)
            said = (prompt + "".join(w.text for w in words[: keep + 1]))[-PROMPT_CHARS:]
            more = _with_text(tr, _replace(req, hypothesis_tokens=()), said, None)
            encoded_rest = tr.encode(rest, encoder_window(rest, encoder_pad))
            rest_result = yield DecodeCall(encoded_rest, more)
            _, rest_words = _checked_words(tr, encoded_rest, rest_result, len(rest) / SAMPLE_RATE)
            last = words[keep]
            words = words[:keep] + [Word(last.start, min(last.end, stop), last.text, last.probability)]
            words += [Word(w.start + stop, w.end + stop, w.text, w.probability) for w in rest_words]
            stats = stats + rest_result.stats
        elif words:
            others = tuple(split_words(a.text) for a in result.alternatives[1:])
        if fixes.speech_onsets:
            words = speech_onsets(words, speech)
        return Hypothesis(
            words=tuple(Word(w.start + offset, w.end + offset, w.text, w.probability) for w in words),
            tokens=tokens,
            language=result.language,
            stats=stats,
            rejected=rejected,
            alternatives=others,
            language_probs=probs,
            continued=skipped is not None,
            retried=retried,
        )

    return job


def stopped_at(words: list[Word], duration: float, speech: np.ndarray | None) -> tuple[int, float] | None:
    """(index of the word, seconds into the window) where a hypothesis stopped following the speech, else None.

    Whisper skips speech in two ways, and DTW shows both: it ends the decode early (the VAD hears
    STALL_SPEECH seconds of speech after the last word, which DTW often stretches over it), or it jumps
    over a stretch inside the window (a word "lasting" several seconds with that much speech inside it).
    A word's own end is taken at most LONGEST_WORD after its start; the point must leave at least
    MIN_REST seconds on both sides (a rest decoded from nearly the window's start decodes the same).
    """
    if speech is None:
        return None
    for i, word in enumerate(words):
        stop = min(word.end, word.start + LONGEST_WORD)
        until = duration if i == len(words) - 1 else word.end
        if stop < MIN_REST or duration - stop < MIN_REST:
            continue
        # speech frames past the word's own tail, up to its (stretched) end or, for the last word, the window's
        heard = np.count_nonzero((speech >= stop + 0.2) & (speech < until)) * FRAME / SAMPLE_RATE
        if heard >= STALL_SPEECH:
            return i, stop
    return None


def speech_onsets(words: list[Word], speech: np.ndarray | None) -> list[Word]:
    """The words, those that DTW started in a pause starting where the VAD next hears speech inside them.

    After a pause DTW often starts the next word in the last one's tail: a context decode put JFK's "ask"
    (said at 3.3 s) at 2.08 s, 0.1 s before "Americans" ended. Captions and SRT cues then started up to a
    second early, and a translation span, which ends before the next word starts, cut the word before it
    ("America" for "Americans"). A word whose span holds a gap of ONSET_GAP without speech frames, with at
    most ONSET_TAIL of speech before the gap (the previous word's tail) and speech after it, starts
    ONSET_LEAD before the first speech frame after the gap. speech: (m,) sorted seconds into the window of
    the VAD's speech frames (None: unknown, nothing moves). Ends never move.
    """
    if speech is None or not words:
        return words
    frame = FRAME / SAMPLE_RATE
    out = []
    for w in words:
        inside = speech[(speech >= w.start - frame) & (speech < w.end)]  # (k,) frames that overlap the word
        edges = np.concatenate([[w.start - frame], inside])  # a gap may also open at the word's start
        gaps = np.flatnonzero(np.diff(edges) >= ONSET_GAP + frame)  # (g,) a gap after edges[j]
        if gaps.size and edges[gaps[0]] + frame - w.start <= ONSET_TAIL:
            w = Word(max(w.start, float(edges[gaps[0] + 1]) - ONSET_LEAD), w.end, w.text, w.probability)
        out.append(w)
    return out


def _checked_words(tr: Transcriber, encoded, result: WindowResult, duration: float) -> tuple[str, list[Word]]:
    """(why Whisper's guards rejected the decode or "", its words in seconds into the window)."""
    if result.no_speech_prob > NO_SPEECH_THRESHOLD and result.avg_logprob < LOGPROB_THRESHOLD:
        return "no speech", []
    if compression_ratio(result.text) > COMPRESSION_RATIO_THRESHOLD:
        return "repetition", []
    words: list[Word] = []
    if result.text.strip():
        for seg in tr.align_words(encoded, result):
            for w in seg.words:
                start = min(max(w.start, 0.0), duration)
                words.append(Word(start, min(max(w.end, start), duration), w.text, w.probability))
    return "", words


def translate_job(
    audio: np.ndarray, request: DecodeRequest, prompt: str, encoder_pad: float = 30.0, draft_text: str = ""
) -> Callable[[Transcriber], Generator[DecodeCall, WindowResult, Translation]]:
    """Encode the span of a final (audio (n,) float32) and decode it with Whisper's translate task.

    draft_text: a guess of the translation, verified as the previous-hypothesis draft (the spec
    engine; the output is the target's either way). For English speech it is the transcript.
    A decode that comes back empty or looping (compression ratio) is tried once more without the
    prompt, on the same encoded audio: the previous translation can pull Whisper's translate task into
    a loop or an immediate end (a 10 s German span after a translation ending "part of the..."
    came back empty), and the finals it covers would get no translation at all.
    """

    def job(tr: Transcriber) -> Generator[DecodeCall, WindowResult, Translation]:
        req = _with_text(tr, request, prompt, draft_text or None)
        encoded = tr.encode(audio, encoder_window(audio, encoder_pad))
        result = yield DecodeCall(encoded, req)
        text, stats = _translated(result), result.stats
        if not text and req.prompt_tokens:
            result = yield DecodeCall(encoded, _replace(req, prompt_tokens=()))
            text, stats = _translated(result), stats + result.stats
        return Translation(text, tuple(result.tokens), stats)

    return job


def _translated(result: WindowResult) -> str:
    """A translate decode's text, or "" for a repetition loop."""
    text = result.text.strip()
    return "" if compression_ratio(text) > COMPRESSION_RATIO_THRESHOLD else text


def _with_text(tr: Transcriber, request: DecodeRequest, prompt: str, draft_text: str | None) -> DecodeRequest:
    """The request with the prompt text (if any) and the draft text (if not None; "" clears the draft) as
    token ids: tokenized here, on the model thread, with the engine's own tokenizer."""
    if prompt:
        request = _replace(request, prompt_tokens=tuple(tr.encode_text(prompt)))
    if draft_text is not None:
        request = _replace(request, hypothesis_tokens=tuple(tr.encode_text(draft_text)) if draft_text else ())
    return request


def _replace(request: DecodeRequest, **changes) -> DecodeRequest:
    import dataclasses

    return dataclasses.replace(request, **changes)
