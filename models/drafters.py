"""Drafters: cheap guesses of the target's next tokens, behind one small protocol.

- ``PreviousHypothesisDrafter``: the continuation of an earlier decode of (nearly) the same audio
  (streaming re-decodes), re-synchronised after a mismatch.
- ``NgramDrafter``: prompt lookup; the last n tokens are found earlier in prompt + output and what
  followed them is proposed.
- ``ChainDrafter``: asks its drafters in order and takes the first non-empty proposal.
- ``RandomDrafter``: random tokens; deliberately bad, for the lossless tests.
- ``DraftDecoderDrafter`` (models/draft.py): a shallow decoder on the target's encoder output.
- ``FeatureDrafter`` (models/feature_draft.py): a shallow decoder on the target's own hidden states.

A drafter is told the whole generated sequence at every call, so it can re-synchronise itself
(crop its cache to the common prefix) whatever the verifier accepted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch


@dataclass(frozen=True)
class Draft:
    """A proposal.

    Attributes:
        tokens: the proposed ids, at most k.
        probs: (len(tokens), V) the draft distributions the tokens were drawn from (sampling mode);
            None means each token was chosen deterministically (a point mass).
    """

    tokens: tuple[int, ...]
    probs: torch.Tensor | None = None


class Drafter(Protocol):
    """Proposes tokens for the target to verify. One decode: begin, (propose, accept)*, finish."""

    name: str
    cheap: bool  # proposing costs next to nothing beside a target pass (a lookup, not a model)

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        """Start a decode after ``prompt`` (the start sequence); sample at ``temperature`` > 0."""
        ...

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        """Up to k tokens to follow ``generated`` (the tokens after the prompt); may be empty."""
        ...

    def accept(self, generated: Sequence[int], features: torch.Tensor | None = None) -> None:
        """The verifier kept ``generated``: drop (crop) whatever state goes beyond it.
        features: (new, d) the target's final-LN hidden states that chose the newly kept tokens
        (row i chose the i-th new token), for drafters that read them (models/feature_draft.py)."""
        ...

    def finish(self) -> None:
        """The decode is over: release caches."""
        ...


class _NoState:
    """Defaults for drafters without a cache (lookups: cheap)."""

    cheap = True

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        self.prompt = list(prompt)

    def accept(self, generated: Sequence[int], features: torch.Tensor | None = None) -> None:
        pass

    def finish(self) -> None:
        pass


class PreviousHypothesisDrafter(_NoState):
    """Proposes the continuation of ``hypothesis`` (generated tokens of an earlier decode).

    While the output follows the hypothesis it proposes the next tokens from the same place.
    After a mismatch it looks for the last ``n`` generated tokens in the hypothesis (n from
    ``max_n`` down to 1), taking the occurrence nearest to where it expected to be, and goes on
    from there. When nothing matches but the output followed the hypothesis up to its last token,
    that token is taken as a substitution (re-decodes often swap one word: " ask" / " asked") and
    the hypothesis goes on after the token it replaced. Otherwise it proposes nothing.
    """

    name = "hypothesis"

    def __init__(self, hypothesis: Sequence[int], max_n: int = 4):
        self.hypothesis = list(hypothesis)
        self.max_n = max_n
        self._offset = 0  # index in the hypothesis minus index in the output

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        super().begin(prompt, temperature, generator)
        self._offset = 0

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        hyp, g = self.hypothesis, len(generated)
        pos = g + self._offset
        m = min(g, self.max_n, pos)
        if 0 <= pos and (m == 0 and pos == g or m > 0 and hyp[pos - m : pos] == list(generated[g - m :])):
            return Draft(tuple(hyp[pos : pos + k]))
        for n in range(min(self.max_n, g), 0, -1):
            suffix = list(generated[g - n :])
            ends = [e for e in range(n, len(hyp) + 1) if hyp[e - n : e] == suffix]
            if ends:
                end = min(ends, key=lambda e: (abs(e - pos), -e))
                self._offset = end - g
                return Draft(tuple(hyp[end : end + k]))
        m = min(g - 1, self.max_n, pos - 1)  # a substitution: the tokens before the last one match
        if 1 <= pos < len(hyp) and hyp[pos - 1 - m : pos - 1] == list(generated[g - 1 - m : g - 1]):
            return Draft(tuple(hyp[pos : pos + k]))
        return Draft(())


class NgramDrafter(_NoState):
    """Prompt lookup: finds the latest earlier occurrence of the last n tokens of prompt + output
    (n from ``max_n`` down to ``min_n``) and proposes the tokens that followed it."""

    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 2):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.max_n, self.min_n = max_n, min_n
        self.prompt: list[int] = []

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        ctx = self.prompt + list(generated)
        for n in range(min(self.max_n, len(ctx) - 1), self.min_n - 1, -1):
            pattern = ctx[-n:]
            for i in range(len(ctx) - n - 1, -1, -1):
                if ctx[i : i + n] == pattern:
                    return Draft(tuple(ctx[i + n : i + n + k]))
        return Draft(())


class RandomDrafter(_NoState):
    """Proposes uniformly random tokens from ``vocab`` (a size, or the ids to draw from). Seeded."""

    name = "random"

    def __init__(self, vocab: int | Sequence[int], seed: int = 0):
        self.vocab = list(range(vocab)) if isinstance(vocab, int) else list(vocab)
        self.seed = seed
        self._rng = random.Random(seed)

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        super().begin(prompt, temperature, generator)
        self._rng = random.Random(self.seed)

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        return Draft(tuple(self._rng.choice(self.vocab) for _ in range(k)))


class ChainDrafter:
    """Asks ``drafters`` in order; the first non-empty proposal wins. All of them see every call."""

    def __init__(self, drafters: Sequence[Drafter]):
        if not drafters:
            raise ValueError("ChainDrafter needs at least one drafter")
        self.drafters = list(drafters)
        self.name = "+".join(d.name for d in self.drafters)
        self.cheap = all(d.cheap for d in self.drafters)

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        for d in self.drafters:
            d.begin(prompt, temperature, generator)

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        for d in self.drafters:
            draft = d.propose(generated, k)
            if draft.tokens:
                return draft
        return Draft(())

    def accept(self, generated: Sequence[int], features: torch.Tensor | None = None) -> None:
        for d in self.drafters:
            d.accept(generated, features)

    def finish(self) -> None:
        for d in self.drafters:
            d.finish()
