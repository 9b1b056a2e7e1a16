"""Whisper's decoding rules, in one place, exactly as CTranslate2 applies them for Whisper.

Order per step (CTranslate2 ``make_logits_processors`` + ``WhisperReplica::generate``):
1. suppress_tokens at every step;
2. suppress_ids_begin (a blank and end-of-text) at the first generated step, if suppress_blank;
3. timestamp rules, when the prompt does not end with <|notimestamps|>:
   - <|notimestamps|> is always suppressed;
   - first step: only timestamps, and none later than max_initial_timestamp;
   - after a timestamp pair (or a lone first timestamp) the next token is text or end-of-text;
     after a single timestamp following text, the next one is a timestamp or end-of-text;
   - timestamps never decrease, and a segment ends after it starts: inside a segment (after text) the
     timestamps up to its start are suppressed, after a segment's end those below it;
   - if the summed probability of all timestamps (after 1-3) beats the most likely text token,
     only timestamps are allowed.
The rules depend only on ``generated`` (the tokens after the start sequence), so a verifier can
apply them at every drafted position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

NEG_INF = float("-inf")


def suppressed_token_ids(suppress_tokens: Sequence[int], non_speech: Sequence[int], specials: Sequence[int]) -> tuple[int, ...]:
    """faster-whisper's get_suppressed_tokens: -1 expands to the non-speech set; the task, sot,
    sot_prev, sot_lm and no_speech tokens (``specials``) are always added; empty stays empty."""
    if not suppress_tokens:
        return ()
    ids = [t for t in suppress_tokens if t >= 0]
    if -1 in suppress_tokens:
        ids.extend(non_speech)
    ids.extend(specials)
    return tuple(sorted(set(ids)))


@dataclass(frozen=True)
class RuleConfig:
    """Ids and options the rules need.

    Attributes:
        n_vocab: logits size.
        eot: <|endoftext|>.
        no_timestamps: <|notimestamps|>; timestamps start at no_timestamps + 1.
        suppress: ids suppressed at every step.
        suppress_begin: ids suppressed at the first generated step (empty: suppress_blank off).
        timestamps: apply the timestamp rules.
        max_initial_timestamp_index: latest first timestamp, in 0.02 s steps (faster-whisper:
            round(max_initial_timestamp / 0.02)).
    """

    n_vocab: int
    eot: int
    no_timestamps: int
    suppress: tuple[int, ...] = ()
    suppress_begin: tuple[int, ...] = ()
    timestamps: bool = True
    max_initial_timestamp_index: int = 50

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1


class WhisperLogitRules:
    """Implements the LogitRules protocol (models/interfaces.py)."""

    def __init__(self, config: RuleConfig):
        self.config = config
        v = config.n_vocab
        self._always = torch.zeros(v, dtype=torch.bool)  # (V,) suppressed at every step
        self._always[list(config.suppress)] = True
        if config.timestamps:
            self._always[config.no_timestamps] = True
        self._first = self._always.clone()  # (V,) at the first step
        self._first[list(config.suppress_begin)] = True
        if config.timestamps:
            self._first[: config.timestamp_begin] = True
            self._first[config.timestamp_begin + config.max_initial_timestamp_index + 1 :] = True

    def apply(self, logits: torch.Tensor, generated: Sequence[int]) -> torch.Tensor:
        """logits (V,) float32 -> a filtered copy (V,), -inf where a token is not allowed."""
        if logits.device != self._always.device:  # masks follow the logits (CUDA sessions)
            self._always, self._first = self._always.to(logits.device), self._first.to(logits.device)
        if not generated:
            return logits.masked_fill(self._first, NEG_INF)
        out = logits.masked_fill(self._always, NEG_INF)
        if not self.config.timestamps:
            return out
        ts, eot = self.config.timestamp_begin, self.config.eot
        last = generated[-1]
        check = True
        if last >= ts:
            penultimate = generated[-2] if len(generated) >= 2 else last
            if penultimate >= ts:  # a pair closed: text (or eot) must follow
                out[ts:] = NEG_INF
                check = False
            else:  # a segment's end: no text may follow, and the next segment starts there or later
                out[:eot] = NEG_INF
                out[ts:last] = NEG_INF
        else:  # inside a segment: its end comes after its start (no zero-length segment, which can loop)
            for token in reversed(generated):
                if token >= ts:
                    out[ts : token + 1] = NEG_INF
                    break
        if check:
            logprobs = torch.log_softmax(out, dim=-1)
            if torch.logsumexp(logprobs[ts:], dim=-1) > logprobs[:ts].max():
                out[:ts] = NEG_INF
        return out
