"""Continuous batching: many decodes advance together, one target pass per step.

Each decode is a ``SpecSequence`` (models/speculative.py) with its own encoder output and
cross-attention K/V, KV cache, pending tokens, drafter and draft length. A step:

1. plan: every active sequence drafts (within the step's row budget) and names its rows;
2. ONE target pass over all those rows (``TextDecoder.run_pass``: linears over every row
   stacked, attention per sequence);
3. consume: each sequence verifies its own rows, accepts, crops its caches;
4. finished sequences leave; sequences added since the last step join the next one.

Row budget: rows are padded up to the pass's block (``PassShape.rows``), so a pass of B pending
rows has room for drafts up to the next multiple of the block at no extra linear cost. In a
batch, drafts get that room and no more (shared round-robin, so no sequence always drafts
first), and only cheap drafters (lookups: previous hypothesis, n-gram) draft at all: a draft
decoder's steps run one sequence at a time, and beside a batched pass they cost more than they
save (scripts/bench_engines.py throughput: at 4 and 16 windows, 98 and 158 tokens/s with it
against 116 and 185 without). A sequence alone drafts as far as its own controller wants (a
streaming re-decode verifies up to 32 hypothesis tokens a pass). Each sequence's controller
(``DraftLength``) measures the whole step as its verify time, so drafting switches itself off
where it does not pay.

With a batch-invariant target (models/invariant.py) every sequence's tokens are bitwise what
it would decode alone, whatever joins or leaves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Sequence, TypeVar

import torch

from specscribe.models.speculative import SpecResult, SpecSequence
from specscribe.models.whisper import PassPart

Tag = TypeVar("Tag", bound=Hashable)
PassRunner = Callable[[Sequence[PassPart]], list[torch.Tensor]]  # parts -> logits per part


def run_decoder_pass(parts: Sequence[PassPart]) -> list[torch.Tensor]:
    """The real runner: one pass of the parts' shared TextDecoder."""
    return [out.logits for out in parts[0].session.decoder.run_pass(parts)]


@dataclass(frozen=True)
class StepStats:
    """What one step did. Attributes: sequences, rows (pending + drafted), drafted, pass_ms."""

    sequences: int
    rows: int
    drafted: int
    pass_ms: float


class BatchDecoder(Generic[Tag]):
    """The step loop over a set of sequences that join and leave between passes.

    Attributes:
        block: rows per block of the target's passes (PassShape.rows); 1 for a target
            without fixed shapes.
        steps: StepStats of every step so far.
    """

    def __init__(
        self,
        block: int = 1,
        runner: PassRunner = run_decoder_pass,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.block, self.runner, self.clock = max(1, block), runner, clock
        self._active: dict[Tag, SpecSequence] = {}
        self._turn = 0  # round-robin start for draft rows
        self.steps: list[StepStats] = []

    def __len__(self) -> int:
        return len(self._active)

    def add(self, tag: Tag, sequence: SpecSequence) -> None:
        """A sequence joins at the next step (a finished one is returned by that step at once)."""
        if tag in self._active:
            raise ValueError(f"a sequence tagged {tag!r} is already decoding")
        self._active[tag] = sequence

    def cancel(self, tag: Tag) -> None:
        """Drop a sequence (its result is never returned); unknown tags are ignored."""
        sequence = self._active.pop(tag, None)
        if sequence is not None:
            sequence.close()

    def step(self) -> list[tuple[Tag, SpecResult]]:
        """Run one pass over every active sequence; return those that finished."""
        finished = [(tag, seq) for tag, seq in self._active.items() if seq.done]
        running = [(tag, seq) for tag, seq in self._active.items() if not seq.done]
        if running:
            self._pass(running)
            finished += [(tag, seq) for tag, seq in running if seq.done]
        out = []
        for tag, seq in finished:
            del self._active[tag]
            out.append((tag, seq.close()))
        return out

    def _draft_limits(self, running: list[tuple[Tag, SpecSequence]]) -> list[int | None]:
        """Per sequence, the most tokens it may draft this step (None: no batch limit)."""
        if len(running) == 1:
            return [None]
        pending = sum(len(seq.pending) for _, seq in running)
        room = -(-pending // self.block) * self.block - pending  # the padding of the last block
        limits = [0] * len(running)
        n = len(running)
        order = [(self._turn + i) % n for i in range(n)]
        self._turn = (self._turn + 1) % n
        wants = {i: running[i][1].wanted_drafts() if running[i][1].cheap_drafter else 0 for i in order}
        while room > 0 and any(wants[i] > limits[i] for i in order):
            for i in order:  # one token at a time, round-robin
                if room > 0 and wants[i] > limits[i]:
                    limits[i] += 1
                    room -= 1
        return limits

    def _pass(self, running: list[tuple[Tag, SpecSequence]]) -> None:
        limits = self._draft_limits(running)
        parts = [seq.plan(limit) for (_, seq), limit in zip(running, limits)]
        propose = [seq.propose_ms for _, seq in running]
        drafted = sum(len(seq.draft.tokens) for _, seq in running)
        t0 = self.clock()
        logits = self.runner(parts)
        pass_ms = (self.clock() - t0) * 1e3
        others = sum(propose)
        for (_, seq), rows, own in zip(running, logits, propose):
            seq.consume(rows, pass_ms + others - own)  # the whole step but its own drafting
        self.steps.append(StepStats(len(running), sum(len(p.tokens) for p in parts), drafted, pass_ms))
