"""Acceptance figures from teacher-forced agreement flags.

Under greedy decoding the draft's proposal at a position equals its teacher-forced argmax as long
as every earlier proposal was accepted, so the flags ``draft argmax == target label`` per position
give the speculative loop's behaviour exactly: in each target pass the draft proposes k tokens,
the run of leading matches is accepted and the target adds one token of its own (the correction,
or the bonus when all k matched).
"""

from __future__ import annotations

from typing import Any, Sequence

KS = (4, 5, 6, 7, 8)


def passes_for(flags: Sequence[bool], k: int) -> int:
    """Target passes to emit len(flags) tokens with draft length k (flags[i]: draft right at i)."""
    n, pos, passes = len(flags), 0, 0
    while pos < n:
        run = 0
        while run < k and pos + run < n and flags[pos + run]:
            run += 1
        pos += run + 1  # accepted run plus the target's own token
        passes += 1
    return passes


def acceptance_report(matches: Sequence[tuple[str, Sequence[bool]]], ks: Sequence[int] = KS) -> dict[str, Any]:
    """matches: (group, per-position flags) per sequence -> overall and per-group figures.

    acceptance: share of positions where the draft's argmax equals the label.
    tokens_per_pass[k]: tokens emitted per target pass at fixed draft length k.
    """

    def figures(rows: Sequence[Sequence[bool]]) -> dict[str, Any]:
        positions = sum(len(r) for r in rows)
        if not positions:
            return {"positions": 0}
        out: dict[str, Any] = {"positions": positions, "acceptance": round(sum(map(sum, rows)) / positions, 4)}
        out["tokens_per_pass"] = {
            str(k): round(positions / max(1, sum(passes_for(r, k) for r in rows)), 3) for k in ks
        }
        return out

    report = figures([flags for _, flags in matches])
    groups = sorted({g for g, _ in matches})
    report["groups"] = {g: figures([f for gg, f in matches if gg == g]) for g in groups}
    return report
