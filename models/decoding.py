"""Prompts, language detection, the reference generation loop and segment splitting.

Everything here matches faster-whisper / CTranslate2 greedy decoding token for token:
- ``build_prompt``: faster-whisper's ``WhisperModel.get_prompt`` (hotwords included; no prefix);
- ``detect_language``: CTranslate2's ``detect_language`` (softmax over the language tokens'
  logits at the <|startoftranscript|> step);
- ``generate``: one token per decoder pass over a ``DecoderSession``, with ``WhisperLogitRules``;
- ``split_segments``: faster-whisper's ``_split_segments_by_timestamps`` (window-relative).

``generate`` is the one generation call; models/speculative.py offers a drop-in with the same
inputs (session, prompt, rules, options).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from specscribe.models.interfaces import DecoderSession, LogitRules

TIME_PRECISION = 0.02  # seconds per timestamp token


def build_prompt(
    sot_sequence: Sequence[int],
    previous_tokens: Sequence[int],
    sot_prev: int,
    no_timestamps: int,
    timestamps: bool,
    n_text_ctx: int = 448,
    hotword_tokens: Sequence[int] = (),
) -> list[int]:
    """[<|startofprev|> hotwords previous] + sot_sequence [+ <|notimestamps|>], faster-whisper's layout.
    hotword_tokens: the ids of " " + hotwords. The text before sot_sequence is at most n_text_ctx // 2 - 1
    tokens (Whisper's cap on the previous text), the hotwords first and the newest previous tokens in the
    room they leave: faster-whisper caps each alone, so long hotwords plus a long history made a prompt
    longer than the context (451 of 448 tokens), which leaves nothing to generate."""
    cap = n_text_ctx // 2 - 1
    prompt: list[int] = []
    if previous_tokens or hotword_tokens:
        prompt.append(sot_prev)
        hot = list(hotword_tokens)[:cap]
        prompt.extend(hot)
        room = cap - len(hot)
        prompt.extend(list(previous_tokens)[-room:] if room else [])
    prompt.extend(sot_sequence)
    if not timestamps:
        prompt.append(no_timestamps)
    return prompt


def max_new_tokens(prompt_len: int, requested: int, n_text_ctx: int = 448) -> int:
    """CTranslate2's limit with faster-whisper's max_length = n_text_ctx:
    min(n_text_ctx // 2, n_text_ctx - (prompt_len - 1)), capped by the request."""
    return max(1, min(requested, n_text_ctx // 2, n_text_ctx - (prompt_len - 1)))


def detect_language(session: DecoderSession, sot: int, lang_ids: Sequence[int]) -> list[tuple[int, float]]:
    """(language token id, probability), most likely first. Uses (and leaves) one cache position."""
    logits = session.forward([sot])[-1]  # (V,)
    probs = torch.softmax(logits[list(lang_ids)], dim=-1)
    order = torch.argsort(probs, descending=True).tolist()
    return [(lang_ids[i], float(probs[i])) for i in order]


@dataclass(frozen=True)
class GenerateOptions:
    """Options of one generation.

    Attributes:
        max_new_tokens: most tokens to generate (end-of-text included).
        temperature: 0 = greedy; > 0 samples from softmax(logits / temperature).
        seed: seed for sampling (None: torch's global generator state).
        eot: <|endoftext|> id, which ends generation.
        sot_index: position of <|startoftranscript|> in the prompt (for no_speech_prob).
        no_speech: <|nospeech|> id, or -1 to skip no_speech_prob.
    """

    max_new_tokens: int
    eot: int
    sot_index: int = 0
    no_speech: int = -1
    temperature: float = 0.0
    seed: int | None = None


@dataclass(frozen=True)
class Generation:
    """What one generation produced.

    Attributes:
        tokens: generated ids without end-of-text (timestamps included).
        sum_logprob: sum of the chosen tokens' log-probabilities (end-of-text included) under
            the filtered, untempered distribution.
        no_speech_prob: softmax probability of <|nospeech|> at the sot position (raw logits).
        passes: decoder passes after the prompt prefill.
        finished: whether end-of-text was produced (False: the length limit was hit).
        logprobs: per token of ``tokens``, its log-probability as in sum_logprob.
    """

    tokens: tuple[int, ...]
    sum_logprob: float
    no_speech_prob: float
    passes: int
    finished: bool
    logprobs: tuple[float, ...] = ()

    @property
    def avg_logprob(self) -> float:
        """faster-whisper's: sum_logprob / (len(tokens) + 1)."""
        return self.sum_logprob / (len(self.tokens) + 1)


def generate(session: DecoderSession, prompt: Sequence[int], rules: LogitRules, options: GenerateOptions) -> Generation:
    """Reference loop: prefill the prompt in one pass, then one token per pass.

    The session must be fresh (length 0); it is left holding the prompt and generated tokens.
    """
    logits = session.forward(list(prompt))  # (P, V)
    no_speech_prob = 0.0
    if options.no_speech >= 0:
        no_speech_prob = float(torch.softmax(logits[options.sot_index], dim=-1)[options.no_speech])
    step_logits = logits[-1]
    generator = None
    if options.temperature > 0 and options.seed is not None:
        generator = torch.Generator().manual_seed(options.seed)
    tokens: list[int] = []
    token_logprobs: list[float] = []
    sum_logprob, passes, finished = 0.0, 0, False
    for _ in range(options.max_new_tokens):
        filtered = rules.apply(step_logits, tokens)  # (V,)
        logprobs = torch.log_softmax(filtered, dim=-1)
        if options.temperature > 0:
            probs = torch.softmax(filtered / options.temperature, dim=-1)
            token = int(torch.multinomial(probs.cpu(), 1, generator=generator))  # CPU generators
        else:
            token = int(torch.argmax(filtered))
        sum_logprob += float(logprobs[token])
        if token == options.eot:
            finished = True
            break
        tokens.append(token)
        token_logprobs.append(float(logprobs[token]))
        if len(tokens) == options.max_new_tokens:
            break
        step_logits = session.forward([token])[-1]
        passes += 1
    if not math.isfinite(sum_logprob):
        sum_logprob = -1e9
    return Generation(tuple(tokens), sum_logprob, no_speech_prob, passes, finished, tuple(token_logprobs))


@dataclass(frozen=True)
class SegmentSpan:
    """A run of generated tokens with window-relative times.

    Attributes:
        start, end: seconds from the window start.
        tokens: the slice of generated tokens, timestamps included.
    """

    start: float
    end: float
    tokens: tuple[int, ...]


def split_segments(tokens: Sequence[int], timestamp_begin: int, duration: float) -> list[SegmentSpan]:
    """faster-whisper's _split_segments_by_timestamps with time_offset 0.

    duration: seconds of real audio in the window (the fallback end without timestamps).
    """
    tokens = list(tokens)
    ts = timestamp_begin
    single_ending = len(tokens) >= 2 and tokens[-2] < ts <= tokens[-1]
    consecutive = [i for i in range(1, len(tokens)) if tokens[i] >= ts and tokens[i - 1] >= ts]
    spans: list[SegmentSpan] = []
    if consecutive:
        slices = consecutive + ([len(tokens)] if single_ending else [])
        last = 0
        for cut in slices:
            part = tokens[last:cut]
            spans.append(SegmentSpan((part[0] - ts) * TIME_PRECISION, (part[-1] - ts) * TIME_PRECISION, tuple(part)))
            last = cut
        return spans
    end = duration
    stamps = [t for t in tokens if t >= ts]
    if stamps and stamps[-1] != ts:
        end = (stamps[-1] - ts) * TIME_PRECISION
    return [SegmentSpan(0.0, end, tuple(tokens))]
