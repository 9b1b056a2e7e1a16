"""The seams between the torch Whisper model, Whisper's logit rules and the speculative loop.

A ``DecoderSession`` is a decoder bound to one window's encoder output, with its own KV cache.
The target model and the draft decoder both expose one, so the speculative loop treats them alike.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch


class DecoderSession(Protocol):
    """A decoder with an explicit KV cache over one encoded window (one sequence).

    Many sessions of one TextDecoder can also share a pass (models/whisper.py ``run_pass``).
    """

    # (rows, d) the final-LN hidden states of the last pass's head rows (what feature drafters
    # read, models/feature_draft.py); None before any pass, or where a session has none
    hidden: torch.Tensor | None

    @property
    def length(self) -> int:
        """Number of tokens currently in the KV cache."""
        ...

    def forward(self, tokens: Sequence[int], logits_from: int = 0, prompt_rows: int | None = None) -> torch.Tensor:
        """Append T new tokens to the cache in one pass.

        Returns logits (T - logits_from, V), float32: row i predicts the token after
        tokens[logits_from + i]. Rows before logits_from (a prompt's) skip the output head.
        prompt_rows: how many leading tokens are the prompt (attended as one group, so that a
        batch-invariant decoder gives them the same bits with or without drafts after them);
        None: all of them in a fresh session, none later.
        """
        ...

    def crop(self, length: int) -> None:
        """Drop cached positions >= length (roll back rejected tokens)."""
        ...

    def fork(self) -> "DecoderSession":
        """A new session on the same window whose cache is a copy of this one's (beam search)."""
        ...

    def copy_from(self, other: "DecoderSession") -> None:
        """Make this session's cache a copy of other's (a spare session reused for a new beam)."""
        ...


class LogitRules(Protocol):
    """Whisper's decoding rules (suppression, blank at the first step, timestamp rules).

    ``generated`` is what was generated so far after the start sequence (sample_begin);
    the rules depend only on it, so the verifier can apply them at each drafted position.
    """

    def apply(self, logits: torch.Tensor, generated: Sequence[int]) -> torch.Tensor:
        """logits: (V,) float32 -> filtered logits (V,), -inf where a token is not allowed."""
        ...
