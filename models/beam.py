"""Beam search and best-of sampling as decodes of the batched engine: every hypothesis of a window
is a row of the shared target pass, with a KV cache of its own (models/batch_decode.py).

Beam search follows CTranslate2 (src/decoding.cc ``BeamSearch``), which faster-whisper runs:
- the prompt is prefilled once, as one hypothesis; each step scores every continuation of every
  live hypothesis by its cumulative log-probability (Whisper's logit rules applied with that
  hypothesis' own tokens, then log-softmax) and takes the best 2 * beam_size;
- of the best beam_size of those, one that ends in end-of-text (or reaches the length limit) is
  finished, and its place goes to the next best candidate that does not end;
- the search stops once round(beam_size * patience) hypotheses have finished, or at the length
  limit; with length_penalty 0, once a step's best candidate has ended and n_best have;
- finished hypotheses are ranked by cumulative log-probability / length ** length_penalty
  (length without end-of-text), the best n_best returned, best first.
Cumulative scores add up in float32, as CTranslate2's do (a float64 sum can order two near-equal
hypotheses the other way); candidates with equal scores go in (hypothesis, token id) order.
One difference: where every other candidate also ends, CTranslate2 keeps the ended one as a live
beam (it then extends a sequence past its end-of-text); here that beam is dropped.

Best-of sampling (Whisper's temperature fallback, ``--best-of``): the prompt is prefilled once,
then best_of hypotheses sample independently (each its own seeded generator) until end-of-text
or the limit, and are ranked as beams are (untempered log-probabilities, as openai/whisper ranks).

Forking a hypothesis copies its parent's cache (``DecoderSession.fork`` / ``copy_from``); with a
batch-invariant target (models/invariant.py) each row's logits are the bits it would get decoded
alone, so a window's beams come out the same whatever else shares the pass.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from specscribe.models.interfaces import DecoderSession, LogitRules
from specscribe.models.types import SpecStats
from specscribe.models.speculative import SpecOptions, SpecResult, StatsCounter, pending_part
from specscribe.models.whisper import PassPart


@dataclass(frozen=True)
class BeamOptions:
    """Attributes: beam_size; patience (the search stops once round(beam_size * patience)
    hypotheses finished); length_penalty (score = log-prob / length ** length_penalty);
    n_best (hypotheses returned, best first)."""

    beam_size: int = 5
    patience: float = 1.0
    length_penalty: float = 1.0
    n_best: int = 1

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.patience <= 0 or not 1 <= self.n_best:
            raise ValueError(f"bad beam options {self}")

    @property
    def max_candidates(self) -> int:
        return max(1, math.floor(self.beam_size * self.patience + 0.5))  # C++ std::round


def ranked_score(logprob: float, length: int, length_penalty: float) -> float:
    """CTranslate2's final score: cumulative log-prob / length ** length_penalty."""
    if length_penalty == 0:
        return logprob
    return logprob / length**length_penalty if length > 0 else -math.inf


@dataclass
class _Hyp:
    """A live hypothesis: its session holds the prompt and every token but ``pending``."""

    session: DecoderSession
    tokens: list[int] = field(default_factory=list)  # generated, end-of-text excluded
    logprobs: list[float] = field(default_factory=list)
    score: float = 0.0  # cumulative log-probability
    pending: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None


class _Group:
    """What beams and samples share: the rows of the live hypotheses, the prompt row, forks, the result.

    Implements the decode protocol of models/batch_decode.py (``plan`` / ``consume`` / ``close``).
    """

    cheap_drafter = False  # hypotheses never draft
    propose_ms = 0.0
    drafted = 0

    def __init__(self, session: DecoderSession, rules: LogitRules, prompt: Sequence[int], options: SpecOptions,
                 n_best: int, length_penalty: float, clock: Callable[[], float] = time.perf_counter):
        self.prompt = list(prompt)
        if not self.prompt or session.length > len(self.prompt):
            raise ValueError("the prompt must hold the start-of-transcript and more than the session's cache")
        if len(self.prompt) > options.n_ctx:  # else it would come back empty, as if nothing were said
            raise ValueError(f"a prompt of {len(self.prompt)} tokens leaves nothing to generate in a context of {options.n_ctx}")
        self.rules, self.options, self.n_best, self.length_penalty = rules, options, n_best, length_penalty
        self.clock = clock
        self.limit = max(0, min(options.max_new_tokens, options.n_ctx - len(self.prompt) + 1))
        self.live = [_Hyp(session, pending=self.prompt[session.length:])]
        self.ended: list[tuple[float, SpecResult]] = []  # (cumulative score, finished hypothesis: end-of-text included)
        self.row_logits: torch.Tensor | None = None
        self.stats = StatsCounter()
        self._spare: list[DecoderSession] = []
        self._parts: list[PassPart] = []  # the planned pass' parts, one per live hypothesis
        self._closed = False

    # ---- the decode protocol ----
    @property
    def done(self) -> bool:
        return self._closed or not self.live or self.limit == 0

    @property
    def pending_rows(self) -> int:
        return sum(len(h.pending) for h in self.live)

    def wanted_drafts(self) -> int:
        return 0

    def plan(self, max_drafts: int | None = None) -> list[PassPart]:
        self._parts = [pending_part(h.session, h.pending, len(self.prompt), self.options.keep_prompt_row)
                       for h in self.live]
        return self._parts

    def consume(self, logits: Sequence[torch.Tensor], pass_ms: float) -> None:
        t0 = self.clock()
        keep = self.options.keep_prompt_row
        for part, out in zip(self._parts, logits):
            start = part.session.length - len(part.tokens)  # the cache length before the pass
            if keep is not None and start <= keep < start + len(part.tokens):
                self.row_logits = out[keep - start - part.logits_from].clone()
        rows = [self.rules.apply(out[-1].clone(), h.tokens) for h, out in zip(self.live, logits)]  # (V,) each
        self._advance(rows)
        self.stats.passes += 1
        self.stats.verify_ms += pass_ms + (self.clock() - t0) * 1e3

    def close(self) -> SpecResult:
        """The best hypothesis, with the n_best ranked (itself first) as ``alternatives``."""
        self._closed = True
        self.live, self._spare = [], []
        ranked = [res for _, res in sorted(self.ended, key=self._rank, reverse=True)]
        if not ranked:  # cancelled before the first pass
            return SpecResult((), (), False, self.row_logits, self.stats.freeze())
        best = ranked[0]
        self.stats.tokens = len(best.tokens)
        alternatives = tuple(ranked[: self.n_best]) if self.n_best > 1 else ()
        return SpecResult(best.tokens, best.logprobs, best.finished, self.row_logits, self.stats.freeze(), alternatives)

    # ---- helpers ----
    def _rank(self, ended: tuple[float, SpecResult]) -> float:
        score, res = ended
        return ranked_score(score, len(res.tokens) - (1 if res.finished else 0), self.length_penalty)

    def _end(self, h: _Hyp, token: int, logprob: float, score: float) -> None:
        """Register a finished hypothesis: h's tokens and its last one, ``token``; score: its cumulative log-prob."""
        finished = token == self.options.eot
        res = SpecResult(tuple(h.tokens + [token]), tuple(h.logprobs + [logprob]), finished, None, SpecStats())
        self.ended.append((score, res))

    def _session_for(self, parent: _Hyp, taken: set[int]) -> DecoderSession:
        """The parent's own session for its first child; a copy of it for the others."""
        if id(parent.session) not in taken:
            taken.add(id(parent.session))
            return parent.session
        if self._spare:
            session = self._spare.pop()
            session.copy_from(parent.session)
            return session
        return parent.session.fork()

    def _next_live(self, children: list[tuple[_Hyp, int, float, float, torch.Generator | None]]) -> None:
        """children: (parent, token, log-prob, cumulative score, generator) of the next live hypotheses."""
        taken: set[int] = set()
        live = [
            _Hyp(self._session_for(p, taken), p.tokens + [t], p.logprobs + [lp], score, [t], gen)
            for p, t, lp, score, gen in children
        ]
        self._spare += [h.session for h in self.live if id(h.session) not in taken]
        self.live = live

    def _advance(self, rows: list[torch.Tensor]) -> None:
        raise NotImplementedError  # BeamSequence, SampleGroup


class BeamSequence(_Group):
    """Beam search over one window (see the module docstring)."""

    def __init__(self, session: DecoderSession, rules: LogitRules, prompt: Sequence[int], options: SpecOptions,
                 beam: BeamOptions, clock: Callable[[], float] = time.perf_counter):
        super().__init__(session, rules, prompt, options, beam.n_best, beam.length_penalty, clock)
        self.beam = beam
        self._top_ended = False  # the best candidate of some step has ended (CTranslate2's early exit)

    def _advance(self, rows: list[torch.Tensor]) -> None:
        logprobs = torch.stack([torch.log_softmax(r, dim=-1) for r in rows])  # (B, V)
        scores = torch.tensor([h.score for h in self.live], dtype=logprobs.dtype)  # (B,)
        total = (logprobs + scores[:, None]).reshape(-1)  # (B * V,)
        n_vocab, size = logprobs.shape[1], self.beam.beam_size
        values, index = torch.topk(total, min(2 * size + 8, total.numel()))  # a margin for ties at the cut
        best = sorted(zip(values.tolist(), index.tolist()), key=lambda c: (-c[0], c[1]))[: 2 * size]
        # (parent index, token, cumulative score), best first
        cands = [(i // n_vocab, i % n_vocab, v) for v, i in best if v > -math.inf]
        last = len(self.live[0].tokens) + 1 >= self.limit
        eot = self.options.eot

        def child(k: int):
            b, token, score = cands[k]
            return self.live[b], token, float(logprobs[b, token]), score, None

        children, secondary = [], size
        for k in range(min(size, len(cands))):
            parent, token, lp, score, _ = child(k)
            if token != eot and not last:
                children.append(child(k))
                continue
            self._end(parent, token, lp, score)
            self._top_ended |= k == 0
            while secondary < len(cands):  # the next best candidate that goes on takes the place
                secondary += 1
                if cands[secondary - 1][1] != eot:
                    children.append(child(secondary - 1))
                    break
        if last:
            finished = True
        elif self.beam.length_penalty == 0:
            finished = self._top_ended and len(self.ended) >= self.n_best
        else:
            finished = len(self.ended) >= self.beam.max_candidates
        if finished or not children:
            self._spare += [h.session for h in self.live]
            self.live = []
            return
        self._next_live(children)


class SampleGroup(_Group):
    """best_of sampled hypotheses of one window at a temperature; the best by score is the result."""

    def __init__(self, session: DecoderSession, rules: LogitRules, prompt: Sequence[int], options: SpecOptions,
                 best_of: int, length_penalty: float = 1.0, seed: int | None = None, n_best: int = 1,
                 clock: Callable[[], float] = time.perf_counter):
        if options.temperature <= 0 or best_of < 1:
            raise ValueError("best-of sampling needs a temperature > 0 and best_of >= 1")
        super().__init__(session, rules, prompt, options, n_best, length_penalty, clock)
        self.best_of = best_of
        self.generators = [torch.Generator().manual_seed((seed or 0) * 1009 + i) if seed is not None else None
                           for i in range(best_of)]
        self.live[0].generator = self.generators[0]  # a lone sample (best_of 1) draws from the first

    def _advance(self, rows: list[torch.Tensor]) -> None:
        first = len(self.live) == 1 and not self.live[0].tokens and len(self.generators) > 1
        draws = [(self.live[0], rows[0], g) for g in self.generators] if first else [
            (h, r, h.generator) for h, r in zip(self.live, rows)
        ]
        temperature, eot = self.options.temperature, self.options.eot
        children = []
        for parent, row, gen in draws:
            probs = torch.softmax(row / temperature, dim=-1)
            token = int(torch.multinomial(probs.cpu(), 1, generator=gen))  # CPU generators
            lp = float(torch.log_softmax(row, dim=-1)[token])
            if token == eot or len(parent.tokens) + 1 >= self.limit:
                self._end(parent, token, lp, parent.score + lp)
            else:
                children.append((parent, token, lp, parent.score + lp, gen))
        if not children:
            self._spare += [h.session for h in self.live]
            self.live = []
            return
        self._next_live(children)
