"""Speculative decoding: a drafter proposes, the target verifies in one pass, the output is the target's.

Glossary
- round: one target decoder pass over [pending tokens + k drafted tokens]. The pending tokens are
  the ones not yet in the target's KV cache: the prompt at the first round, afterwards the last
  emitted token. The pass gives k+1 next-token predictions (one per drafted position, plus one).
- draft length k: how many tokens the drafter may propose in a round; adapted by `DraftLength`
  (models/draft_policy.py).
  k = 0 is a plain greedy (or sampling) step: one token per target pass.
- accepted token: a drafted token the target agrees with. Greedy: the target's argmax, after
  Whisper's logit rules applied with the exact prefix, equals the draft. Sampling: the draft
  passed the rejection test u < min(1, p(x) / q(x)).
- correction token: the target's own token at the first rejected position (greedy: its argmax;
  sampling: a sample from the normalised residual max(0, p - q)).
- bonus token: the target's next token after all k drafts were accepted; its prediction came
  with the same pass, so it is free.
Each round emits (accepted + 1) tokens for one target pass, stopping early at end-of-text or at
the length limit. Both KV caches are then cropped so that they hold the prompt and every emitted
token except the last one, which opens the next round.

Greedy output equals what the target decodes alone token for token, at every compute type: a
batch-invariant target (models/invariant.py) gives a row the same bits in a (k+1)-token pass, a
1-token pass, or a pass shared with other sequences.
Sampling output has exactly the target's distribution (Leviathan et al. 2023, Chen et al. 2023).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from specscribe.models.draft_policy import DraftLength
from specscribe.models.drafters import Draft, Drafter
from specscribe.models.interfaces import DecoderSession, LogitRules
from specscribe.models.types import SpecStats
from specscribe.models.verify import common_prefix, verify_greedy, verify_sampling
from specscribe.models.whisper import PassPart

if TYPE_CHECKING:
    from specscribe.models.decoding import GenerateOptions, Generation


@dataclass(frozen=True)
class SpecOptions:
    """How to run one decode.

    Attributes:
        eot: the end-of-text token id; generation stops after emitting it.
        max_new_tokens: most tokens generated (end-of-text included).
        n_ctx: the target's context length (n_text_ctx). No pass writes beyond it, so at most
            n_ctx - len(prompt) + 1 tokens are generated, as in the plain loop.
        temperature: 0 for greedy (the default); > 0 samples from softmax(logits / temperature).
        k_init, k_min, k_max: the draft length at the start, and its bounds.
        k_steps: how k adapts (models/draft_policy.py DraftLength): "additive" (+2 after a fully accepted
            draft, -1 after a rejection: a draft model, whose every token costs a step) or
            "multiplicative" (double, or halve but keep what was accepted plus one: a lookup
            drafter such as a re-decode's previous hypothesis, free to draft, whose rejected rows
            still cost the target pass).
        adaptive: adapt k and switch speculation off when it does not pay; False keeps k = k_init.
        min_rounds: speculative rounds measured before speculation may be judged a loss.
        probe_after: plain steps after a switch-off before speculation is tried again (doubles
            after each further switch-off in the same decode).
        keep_prompt_row: index of a prompt position whose raw logits the result keeps (the
            start-of-transcript row, for no_speech_prob); None keeps nothing.
        plain_ms: what a plain step costs, measured elsewhere (the drafting policy's plain decodes in
            the same context); the draft-length controller prices rounds with it until this decode
            measures plain steps of its own. None: the round's own verify time stands in.
    """

    eot: int
    max_new_tokens: int = 224
    n_ctx: int = 448
    temperature: float = 0.0
    k_init: int = 4
    k_min: int = 1
    k_max: int = 12
    k_steps: str = "additive"
    adaptive: bool = True
    min_rounds: int = 4
    probe_after: int = 16
    keep_prompt_row: int | None = None
    plain_ms: float | None = None


@dataclass(frozen=True)
class SpecResult:
    """The output of one decode.

    Attributes:
        tokens: generated ids (end-of-text included when it was generated).
        logprobs: per token, log_softmax of the filtered logits (temperature 1) at that token.
        finished: the decode ended with end-of-text (False: the length limit ended it).
        prompt_row_logits: raw logits (V,) at options.keep_prompt_row, or None.
        stats: counters and timings.
        alternatives: the n-best hypotheses of a beam search or best-of sampling, ranked, this
            one first (models/beam.py); empty for a single hypothesis.
    """

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    finished: bool
    prompt_row_logits: torch.Tensor | None
    stats: SpecStats
    alternatives: tuple["SpecResult", ...] = ()


class StatsCounter:
    """Mutable counters during a decode; frozen into SpecStats at the end."""

    def __init__(self):
        self.passes = self.tokens = self.drafted = self.accepted = 0
        self.draft_ms = self.verify_ms = self.prefill_ms = 0.0

    def freeze(self) -> SpecStats:
        return SpecStats(self.passes, self.tokens, self.drafted, self.accepted, self.draft_ms, self.verify_ms,
                         self.prefill_ms)


class SpecSequence:
    """One decode (one window, one request) as steps: ``plan`` the rows of the next target pass,
    the pass runs (alone, or together with other sequences: models/batch_decode.py), then
    ``consume`` its logits. ``generate`` drives a single sequence.

    target: a fresh DecoderSession, or one whose cache holds a prefix of the prompt.
    drafter: None decodes plainly (k = 0 every round).
    generator: the random source for sampling (temperature > 0).
    clock: seconds, for the timings (tests inject a fake one).
    """

    def __init__(
        self,
        target: DecoderSession,
        rules: LogitRules,
        prompt: Sequence[int],
        drafter: Drafter | None,
        options: SpecOptions,
        generator: torch.Generator | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.prompt = list(prompt)
        if not self.prompt:
            raise ValueError("the prompt must hold at least the start-of-transcript token")
        if target.length > len(self.prompt):
            raise ValueError(f"target cache holds {target.length} tokens, more than the prompt's {len(self.prompt)}")
        if len(self.prompt) > options.n_ctx:  # else it would come back empty, as if nothing were said
            raise ValueError(f"a prompt of {len(self.prompt)} tokens leaves nothing to generate in a context of {options.n_ctx}")
        self.target, self.rules, self.drafter, self.options = target, rules, drafter, options
        self.generator, self.clock = generator, clock
        # the plain loop's limit: no pass writes beyond n_ctx, so at most n_ctx - P + 1 tokens
        self.limit = max(0, min(options.max_new_tokens, options.n_ctx - len(self.prompt) + 1))
        self.control = DraftLength(options)
        self.stats = StatsCounter()
        self.generated: list[int] = []
        self.logprobs: list[float] = []
        self.pending = self.prompt[target.length :]  # tokens not yet in the target's cache
        self.row_logits: torch.Tensor | None = None
        self.finished = False
        self.draft, self.propose_ms, self._first = Draft(()), 0.0, 0  # the planned pass's
        if drafter is not None:  # its start-up (a draft decoder's cross K/V) is drafting time
            t0 = clock()
            drafter.begin(self.prompt, options.temperature, generator)
            self.stats.draft_ms += (clock() - t0) * 1e3

    @property
    def cheap_drafter(self) -> bool:
        """Whether this sequence drafts with lookups only (see Drafter.cheap)."""
        return self.drafter is not None and self.drafter.cheap

    @property
    def done(self) -> bool:
        return self.finished or len(self.generated) >= self.limit

    @property
    def pending_rows(self) -> int:
        """Rows the next pass needs before any draft."""
        return len(self.pending)

    @property
    def drafted(self) -> int:
        """Tokens drafted for the planned pass."""
        return len(self.draft.tokens)

    def wanted_drafts(self) -> int:
        """How many tokens the next pass would draft: the controller's k, within the room left
        (k drafts can emit k + 1 tokens) and the context."""
        if self.drafter is None:
            return 0
        room = self.limit - len(self.generated)
        return max(0, min(self.control.next_k(), room - 1, self.options.n_ctx - self.target.length - len(self.pending)))

    def plan(self, max_drafts: int | None = None) -> list[PassPart]:
        """Draft (at most max_drafts tokens) and return this sequence's rows of the next pass (one part)."""
        k = self.wanted_drafts() if max_drafts is None else min(self.wanted_drafts(), max_drafts)
        draft, self.propose_ms = Draft(()), 0.0
        if k > 0:
            t0 = self.clock()
            draft = self.drafter.propose(self.generated, k)
            draft = Draft(tuple(draft.tokens[:k]), None if draft.probs is None else draft.probs[:k])
            self.propose_ms = (self.clock() - t0) * 1e3
        self.draft = draft
        part = pending_part(self.target, self.pending, len(self.prompt), self.options.keep_prompt_row)
        self._first = part.logits_from
        return [PassPart(self.target, part.tokens + list(draft.tokens), logits_from=part.logits_from,
                         prompt_rows=part.prompt_rows)]

    def consume(self, outputs: Sequence[torch.Tensor], pass_ms: float) -> None:
        """outputs: per planned part, its rows' logits (from logits_from on). pass_ms: what the pass
        cost this sequence (a batch's whole pass time, others' drafting included)."""
        (logits,) = outputs
        t0 = self.clock()
        opts, draft, pending = self.options, self.draft, self.pending
        start = self.target.length - len(pending) - len(draft.tokens)  # the cache length before the pass
        prefill = len(pending) > 1
        if opts.keep_prompt_row is not None and start <= opts.keep_prompt_row < start + len(pending):
            self.row_logits = logits[opts.keep_prompt_row - start - self._first].clone()
        rows = logits[len(pending) - 1 - self._first :]  # (n + 1, V): row i predicts the token after draft[:i]
        room = self.limit - len(self.generated)
        if opts.temperature > 0:
            emitted, lps = verify_sampling(rows, draft, self.generated, self.rules, opts.temperature, opts.eot, room, self.generator)
        else:
            emitted, lps = verify_greedy(rows, draft.tokens, self.generated, self.rules, opts.eot, room)
        verify_ms = pass_ms + (self.clock() - t0) * 1e3
        n_acc = sum(1 for _ in common_prefix(emitted, draft.tokens))
        self.generated += emitted
        self.logprobs += lps
        self.finished = emitted[-1] == opts.eot
        # keep the prompt and every emitted token but the last one in the caches
        self.target.crop(len(self.prompt) + len(self.generated) - 1)
        self.pending = [self.generated[-1]]
        t1 = self.clock()
        if self.drafter is not None:
            hidden = self.target.hidden  # (rows, d): the target's states, for feature drafters
            states = None if hidden is None else hidden[len(pending) - 1 - self._first :][: len(emitted)]
            self.drafter.accept(self.generated, states)
        draft_ms = self.propose_ms + (self.clock() - t1) * 1e3
        st = self.stats
        if st.passes == 0:
            st.prefill_ms = verify_ms
        st.passes += 1
        st.tokens += len(emitted)
        st.drafted += len(draft.tokens)
        st.accepted += n_acc
        st.verify_ms += verify_ms
        st.draft_ms += draft_ms
        self.control.update(len(draft.tokens), n_acc, len(emitted), verify_ms, draft_ms, measure=not prefill)

    def close(self) -> SpecResult:
        """End the decode (release the drafter's caches) and return what it produced."""
        if self.drafter is not None:
            self.drafter.finish()
            self.drafter = None
        return SpecResult(tuple(self.generated), tuple(self.logprobs), self.finished, self.row_logits, self.stats.freeze())


def pending_part(session: DecoderSession, pending: list[int], prompt_len: int, keep_prompt_row: int | None) -> PassPart:
    """A sequence's pending tokens as its part of the next pass: the output head runs on the last row,
    and from the kept prompt row (no_speech_prob) when that row is among them; a prompt attends as one group."""
    start, first = session.length, len(pending) - 1
    if keep_prompt_row is not None and start <= keep_prompt_row < start + len(pending):
        first = min(first, keep_prompt_row - start)
    prompt_rows = len(pending) if start < prompt_len else 0
    return PassPart(session, list(pending), logits_from=first, prompt_rows=prompt_rows)


def run_alone(seq: SpecSequence) -> SpecResult:
    """Drive one sequence to its end, every pass a pass of its own target session."""
    try:
        while not seq.done:
            (part,) = seq.plan()
            t0 = seq.clock()
            logits = seq.target.forward(part.tokens, logits_from=part.logits_from, prompt_rows=part.prompt_rows)
            seq.consume([logits], (seq.clock() - t0) * 1e3)
    finally:
        result = seq.close()
    return result


def generate(
    target: DecoderSession,
    rules: LogitRules,
    prompt: Sequence[int],
    drafter: Drafter | None,
    options: SpecOptions,
    generator: torch.Generator | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SpecResult:
    """Decode after ``prompt`` (the start sequence) with the target alone, speculating with
    ``drafter`` (see SpecSequence for the arguments)."""
    return run_alone(SpecSequence(target, rules, prompt, drafter, options, generator, clock))


def window_sequence(
    session: DecoderSession,
    prompt: Sequence[int],
    rules: LogitRules,
    options: "GenerateOptions",
    drafter: Drafter | None,
    n_ctx: int,
    spec: SpecOptions | None = None,
) -> SpecSequence:
    """A SpecSequence for the inputs of models/decoding.generate (its eot, length, temperature,
    seed and no-speech row come from ``options``; ``spec`` adds the draft-length settings)."""
    spec = window_spec_options(options, n_ctx, spec)
    generator = None
    if options.temperature > 0 and options.seed is not None:
        generator = torch.Generator().manual_seed(options.seed)
    return SpecSequence(session, rules, prompt, drafter, spec, generator)


def window_spec_options(options: "GenerateOptions", n_ctx: int, spec: SpecOptions | None = None) -> SpecOptions:
    """SpecOptions with the eot, length, temperature and no-speech row of models/decoding's ``options``."""
    import dataclasses

    return dataclasses.replace(
        spec or SpecOptions(eot=options.eot),
        eot=options.eot,
        max_new_tokens=options.max_new_tokens,
        n_ctx=n_ctx,
        temperature=options.temperature,
        keep_prompt_row=options.sot_index if options.no_speech >= 0 else None,
    )


def to_generation(res: SpecResult, options: "GenerateOptions") -> "Generation":
    """A SpecResult as models/decoding.generate's Generation (end-of-text dropped)."""
    import math

    from specscribe.models.decoding import Generation

    tokens = res.tokens[:-1] if res.finished else res.tokens
    sum_logprob = sum(res.logprobs)
    if not math.isfinite(sum_logprob):
        sum_logprob = -1e9
    no_speech_prob = 0.0
    if res.prompt_row_logits is not None:
        no_speech_prob = float(torch.softmax(res.prompt_row_logits, dim=-1)[options.no_speech])
    passes = max(0, res.stats.target_passes - 1)
    return Generation(tuple(tokens), sum_logprob, no_speech_prob, passes, res.finished, res.logprobs[: len(tokens)])


def generate_window(
    session: DecoderSession,
    prompt: Sequence[int],
    rules: LogitRules,
    options: "GenerateOptions",
    drafter: Drafter | None,
    n_ctx: int,
    spec: SpecOptions | None = None,
) -> tuple["Generation", SpecStats]:
    """A drop-in for models/decoding.generate (same inputs, same Generation) plus SpecStats."""
    res = run_alone(window_sequence(session, prompt, rules, options, drafter, n_ctx, spec))
    return to_generation(res, options), res.stats
