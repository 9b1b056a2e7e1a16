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

A decode may need several parts of a pass: a beam search or a best-of sampling (models/beam.py)
gives every live hypothesis a part of its own, all in the same pass. The decode protocol
(``Decoding``) is what SpecSequence, BeamSequence and SampleGroup share.

With a batch-invariant target (models/invariant.py) every sequence's tokens are bitwise what
it would decode alone, whatever joins or leaves.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Protocol, Sequence, TypeVar

import torch

from specscribe.models.speculative import SpecResult
from specscribe.models.whisper import PassPart

Tag = TypeVar("Tag", bound=Hashable)
PassRunner = Callable[[Sequence[PassPart]], list[torch.Tensor]]  # parts -> logits per part


class Decoding(Protocol):
    """One decode as steps of shared passes: plan its parts, the pass runs, consume their logits."""

    propose_ms: float  # drafting time of the planned pass
    cheap_drafter: bool  # drafts by lookups only (models/drafters.py Drafter.cheap)

    @property
    def done(self) -> bool: ...

    @property
    def pending_rows(self) -> int:
        """Rows the next pass needs before any draft."""
        ...

    @property
    def drafted(self) -> int:
        """Tokens drafted for the planned pass."""
        ...

    def wanted_drafts(self) -> int: ...

    def plan(self, max_drafts: int | None = None) -> list[PassPart]:
        """Draft (at most max_drafts tokens) and return this decode's parts of the next pass."""
        ...

    def consume(self, outputs: Sequence[torch.Tensor], pass_ms: float) -> None:
        """outputs: per planned part, its logits; pass_ms: what the pass cost this decode."""
        ...

    def close(self) -> SpecResult: ...


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


@dataclass
class StepTotals:
    """StepStats summed over every step of a loop (constant memory: a server's loop runs for days).
    Attributes: passes, sequences, rows, drafted, pass_ms (sums), max_sequences."""

    passes: int = 0
    sequences: int = 0
    rows: int = 0
    drafted: int = 0
    pass_ms: float = 0.0
    max_sequences: int = 0

    def add(self, step: StepStats) -> None:
        self.passes += 1
        self.sequences += step.sequences
        self.rows += step.rows
        self.drafted += step.drafted
        self.pass_ms += step.pass_ms
        self.max_sequences = max(self.max_sequences, step.sequences)


class BatchDecoder(Generic[Tag]):
    """The step loop over a set of sequences that join and leave between passes.

    Attributes:
        block: rows per block of the target's passes (PassShape.rows); 1 for a target
            without fixed shapes.
        steps: StepStats of the most recent steps (at most ``history``).
        totals: StepStats summed over every step.
    """

    def __init__(
        self,
        block: int = 1,
        runner: PassRunner = run_decoder_pass,
        clock: Callable[[], float] = time.perf_counter,
        history: int = 1000,
    ):
        self.block, self.runner, self.clock = max(1, block), runner, clock
        self._active: dict[Tag, Decoding] = {}
        self._turn = 0  # round-robin start for draft rows
        self.steps: collections.deque[StepStats] = collections.deque(maxlen=history)
        self.totals = StepTotals()

    def __len__(self) -> int:
        return len(self._active)

    def add(self, tag: Tag, sequence: Decoding) -> None:
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

    def _draft_limits(self, running: list[tuple[Tag, Decoding]]) -> list[int | None]:
        """Per sequence, the most tokens it may draft this step (None: no batch limit)."""
        if len(running) == 1:
            return [None]
        pending = sum(seq.pending_rows for _, seq in running)
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

    def _pass(self, running: list[tuple[Tag, Decoding]]) -> None:
        limits = self._draft_limits(running)
        planned = [seq.plan(limit) for (_, seq), limit in zip(running, limits)]
        parts = [part for own in planned for part in own]
        propose = [seq.propose_ms for _, seq in running]
        drafted = sum(seq.drafted for _, seq in running)
        t0 = self.clock()
        logits = self.runner(parts)
        pass_ms = (self.clock() - t0) * 1e3
        others, at = sum(propose), 0
        for (_, seq), own_parts, own in zip(running, planned, propose):
            seq.consume(logits[at : at + len(own_parts)], pass_ms + others - own)  # the whole step but its own drafting
            at += len(own_parts)
        step = StepStats(len(running), sum(len(p.tokens) for p in parts), drafted, pass_ms)
        self.steps.append(step)
        self.totals.add(step)
