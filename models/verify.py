"""The verifier's rules: which drafted tokens the target accepts, and what it emits instead.

Greedy: the target's argmax after Whisper's logit rules, applied with the exact prefix at every
drafted position, must equal the draft; the first disagreement is replaced by the target's own
token (the correction), and a fully accepted draft gets the pass's last prediction free (the
bonus). Sampling: the rejection rule min(1, p(x)/q(x)) with the normalised residual max(0, p - q)
(Leviathan et al. 2023, Chen et al. 2023), so the output has exactly the target's distribution.
"""

from __future__ import annotations

from typing import Sequence

import torch

from specscribe.models.drafters import Draft
from specscribe.models.interfaces import LogitRules


def common_prefix(a: Sequence[int], b: Sequence[int]):
    for x, y in zip(a, b):
        if x != y:
            return
        yield x


def verify_greedy(
    rows: torch.Tensor, draft: Sequence[int], generated: list[int], rules: LogitRules, eot: int, room: int
) -> tuple[list[int], list[float]]:
    """rows: (n + 1, V) raw logits. Emits the accepted drafts, then the correction or bonus token."""
    out: list[int] = []
    lps: list[float] = []
    for i in range(len(draft) + 1):
        filtered = rules.apply(rows[i].clone(), generated + out)  # (V,)
        token = int(filtered.argmax())
        lps.append(float(torch.log_softmax(filtered, dim=-1)[token]))
        out.append(token)
        if token == eot or len(out) >= room or i == len(draft) or token != draft[i]:
            break
    return out, lps


def verify_sampling(
    rows: torch.Tensor,
    draft: Draft,
    generated: list[int],
    rules: LogitRules,
    temperature: float,
    eot: int,
    room: int,
    generator: torch.Generator | None,
) -> tuple[list[int], list[float]]:
    """The rejection rule: accept x with prob min(1, p(x)/q(x)), else sample max(0, p - q), normalised."""
    out: list[int] = []
    lps: list[float] = []
    for i in range(len(draft.tokens) + 1):
        filtered = rules.apply(rows[i].clone(), generated + out)  # (V,)
        p = torch.softmax(filtered / temperature, dim=-1)  # (V,)
        accepted = False
        if i < len(draft.tokens):
            x = draft.tokens[i]
            q = _draft_dist(draft, i, p)  # (V,)
            u = float(torch.rand((), generator=generator))
            accepted = float(q[x]) > 0 and u < min(1.0, float(p[x]) / float(q[x]))
            if accepted:
                token = x
            else:
                residual = torch.clamp(p - q, min=0)
                total = float(residual.sum())
                token = int(torch.multinomial((residual / total if total > 0 else p).cpu(), 1, generator=generator))
        else:
            token = int(torch.multinomial(p.cpu(), 1, generator=generator))  # CPU generators: a CUDA row is sampled on the CPU
        lps.append(float(torch.log_softmax(filtered, dim=-1)[token]))
        out.append(token)
        if token == eot or len(out) >= room or not accepted:
            break
    return out, lps


def _draft_dist(draft: Draft, i: int, like: torch.Tensor) -> torch.Tensor:
    """The drafter's distribution at position i (V,); a point mass when it gave none."""
    if draft.probs is not None:
        return draft.probs[i].to(like.dtype)
    q = torch.zeros_like(like)
    q[draft.tokens[i]] = 1.0
    return q
