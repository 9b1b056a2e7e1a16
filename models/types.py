"""Frozen value types shared by the engines, the speculative decoder and the pipeline.

Times are seconds (float). Inside a WindowResult they are relative to the window's start;
the pipeline shifts them to absolute stream/file time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Task = Literal["transcribe", "translate"]


@dataclass(frozen=True)
class Word:
    """One word with its time span.

    Attributes:
        start: start time in seconds.
        end: end time in seconds.
        text: the word as decoded, usually with its leading space.
        probability: mean token probability of the word under the target.
    """

    start: float
    end: float
    text: str
    probability: float = 1.0


@dataclass(frozen=True)
class Alternative:
    """One of the n-best hypotheses of a decode, or of a segment (its span of each hypothesis).

    Attributes:
        text: the hypothesis' text.
        tokens: its text token ids (no timestamp or special tokens).
        avg_logprob: a window's: its sum of log-probabilities / (all its tokens + 1), as
            WindowResult's; a segment's: the mean log-probability of its tokens.
        token_logprobs: per token of ``tokens``, its log-probability (a window's, where the engine
            keeps them: spec; empty for ct2 and for a segment's).
    """

    text: str
    tokens: tuple[int, ...]
    avg_logprob: float
    token_logprobs: tuple[float, ...] = ()


@dataclass(frozen=True)
class Segment:
    """A run of text between two timestamp tokens (or a whole window without timestamps).

    Attributes:
        start, end: seconds.
        text: decoded text of the segment.
        tokens: the text token ids of the segment (no timestamp tokens).
        words: word timings, empty unless word timestamps were asked for.
        alternatives: the n-best texts of this span, best (the segment's own) first; empty unless
            asked for (``--n-best``).
        language: the language it was decoded in, when detected per window (``--multilingual``).
    """

    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    words: tuple[Word, ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    language: str | None = None


@dataclass(frozen=True)
class SpecStats:
    """Speculative-decoding counters for one decode, or summed over many.

    Attributes:
        target_passes: decoder passes of the target model, the first one (the prompt prefill, which
            can verify drafts too) included, so a plain decode has tokens == target_passes.
        tokens: tokens emitted (end-of-text included).
        drafted: tokens proposed by drafters.
        accepted: drafted tokens the target agreed with.
        draft_ms: wall time spent in drafters.
        verify_ms: wall time spent in target decoder passes and the logit rules.
        prefill_ms: of verify_ms, the first pass's (the prompt prefill, which every decode pays
            whatever it drafts: models/draft_policy.py times the rest).
    """

    target_passes: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    prefill_ms: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_target_pass(self) -> float:
        return self.tokens / self.target_passes if self.target_passes else 0.0

    def __add__(self, other: "SpecStats") -> "SpecStats":
        return SpecStats(
            target_passes=self.target_passes + other.target_passes,
            tokens=self.tokens + other.tokens,
            drafted=self.drafted + other.drafted,
            accepted=self.accepted + other.accepted,
            draft_ms=self.draft_ms + other.draft_ms,
            verify_ms=self.verify_ms + other.verify_ms,
            prefill_ms=self.prefill_ms + other.prefill_ms,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["acceptance_rate"] = round(self.acceptance_rate, 4)
        out["tokens_per_target_pass"] = round(self.tokens_per_target_pass, 4)
        out["draft_ms"] = round(self.draft_ms, 2)
        out["verify_ms"] = round(self.verify_ms, 2)
        out["prefill_ms"] = round(self.prefill_ms, 2)
        return out


@dataclass(frozen=True)
class DecodeRequest:
    """What to decode from one encoded window.

    Attributes:
        task: "transcribe" or "translate" (to English).
        language: ISO code such as "en"; None detects it from the audio.
        timestamps: emit timestamp tokens (segments); False puts <|notimestamps|> in the prompt.
        prompt_tokens: previous text (or an initial prompt) as token ids, placed after <|startofprev|>.
        temperature: 0 for greedy; > 0 samples (Whisper's fallback).
        max_new_tokens: cap on generated tokens (Whisper: 448 // 2).
        suppress_blank: suppress a leading blank and end-of-text at the first generated step.
        suppress_tokens: ids to suppress at every step; -1 means the model's non-speech set.
        hypothesis_tokens: an earlier decode of (nearly) the same audio, as generated tokens,
            for the previous-hypothesis drafter (streaming re-decodes).
        max_initial_timestamp: latest allowed first timestamp, seconds.
        seed: seed for sampling, so a fallback decode can be reproduced.
        beam_size: beam search width at temperature 0 (1: greedy, the default).
        patience: beam search stops once round(beam_size * patience) hypotheses finished.
        length_penalty: hypotheses rank by log-prob / length ** length_penalty.
        best_of: hypotheses sampled at a temperature > 0; the best one is kept.
        n_best: hypotheses returned as WindowResult.alternatives (1: none), at most beam_size
            (or best_of when sampling).
        hotwords: words to favour, as faster-whisper's hotwords: a prompt after <|startofprev|>.
    """

    task: Task = "transcribe"
    language: str | None = None
    timestamps: bool = True
    prompt_tokens: tuple[int, ...] = ()
    temperature: float = 0.0
    max_new_tokens: int = 224
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] = (-1,)
    hypothesis_tokens: tuple[int, ...] = ()
    max_initial_timestamp: float = 1.0
    seed: int | None = None
    beam_size: int = 1
    patience: float = 1.0
    length_penalty: float = 1.0
    best_of: int = 1
    n_best: int = 1
    hotwords: str = ""

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.best_of < 1 or self.n_best < 1 or self.patience <= 0:
            raise ValueError("beam_size, best_of and n_best must be >= 1, patience > 0")
        if self.n_best > max(self.beam_size, self.best_of):
            raise ValueError(f"n_best {self.n_best} > beam_size {self.beam_size}: n-best needs that many beams")


@dataclass(frozen=True)
class WindowResult:
    """The decode of one window (at most 30 s).

    Attributes:
        tokens: generated ids, timestamps included, without the start sequence and end-of-text.
        text: decoded text (timestamps removed).
        segments: segments with times relative to the window start.
        language: the language used (given or detected).
        language_probability: detection probability (1.0 when the language was given).
        avg_logprob: sum of the chosen tokens' log-probabilities / (len(tokens) + 1).
        no_speech_prob: probability of <|nospeech|> at the first step.
        temperature: temperature this result was decoded at.
        stats: speculative-decoding counters for this decode.
        token_logprobs: per token of ``tokens``, the log-probability the decode gave it (filtered,
            untempered logits); empty when the engine does not keep them (ct2).
        alternatives: the n-best hypotheses (request.n_best > 1), ranked, this one first.
    """

    tokens: tuple[int, ...]
    text: str
    segments: tuple[Segment, ...]
    language: str
    language_probability: float = 1.0
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0
    stats: SpecStats = field(default_factory=SpecStats)
    token_logprobs: tuple[float, ...] = ()
    alternatives: tuple[Alternative, ...] = ()


@dataclass(frozen=True)
class EncodedAudio:
    """An engine's encoding of one window; decode it as often as needed (transcribe and translate).

    Attributes:
        duration: seconds of real audio in the window (<= 30).
        handle: engine-private encoder output (torch tensor (1, n_ctx, d) or a CTranslate2 StorageView).
    """

    duration: float
    handle: Any
