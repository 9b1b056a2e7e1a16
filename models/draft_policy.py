"""Which drafter a decode drafts with (a fixed rule, or a bandit over measured speed), and how many
tokens it drafts a round (`DraftLength`, each decode's own controller).

Arms (what one greedy decode may draft with):
- "none": plain decoding, one token per target pass;
- "ngram": prompt lookup (models/drafters.py NgramDrafter);
- "decoder": the engine's trained draft (DraftDecoderDrafter, or FeatureDrafter for a feature draft);
- "hypothesis+ngram", "hypothesis+decoder": a re-decode's previous hypothesis first, then the other.

``fixed_arm`` is the rule `--draft` names (auto's rule: a re-decode drafts its hypothesis with
n-gram lookup behind it, a first decode drafts with the decoder where its card says it pays).
``DraftPolicy`` (`--draft auto`, `--draft-policy measured`) instead plays, per decode, the arm with
the best measured reward in its context, as TLT's bandit picks its drafting strategy:

- reward: tokens emitted per millisecond of the decode's target passes and drafting, the prompt pass
  included (the drafter's start-up and proposals count too). Until 2026-12-06 the prompt pass's time
  was left out, as every arm pays it, while its tokens counted: in a re-decode, whose prompt pass
  verifies most of the previous hypothesis, one decode's reward then ranged 8.5x between the 10th and
  90th percentiles (3.4x with the pass counted), against 9-13 % between the two hypothesis arms, and
  the bandit settled on the slower arm in 2 of 3 live runs (docs/benchmarks.md). Passes shared with
  other decodes are timed whole, so sharing lowers every arm alike;
- context: language group and task, first decode or re-decode, alone or sharing passes with other
  decodes when it started (a drafter that pays alone may not beside a batch that fills the pass);
- value of an arm: discounted tokens / discounted ms over the context's recent decodes;
- choice: every arm is played once, the fixed rule's pick first; then the highest
  value * (1 + explore * sqrt(ln N / n)) (discounted UCB, Garivier & Moulines 2011; N, n discounted
  counts of the context and the arm, decodes still in flight counted as played), the fixed rule's arm's
  raised by ``prior_margin`` (15 %): the rule was right where it was measured, and another arm must be
  clearly better to replace it. A worse arm is re-tried less and less often, and again once the
  discount has forgotten it (the draft adapted, the load changed).

How many tokens to draft stays each decode's own controller's (``DraftLength``, at the end), which
prices its rounds with the plain step cost this policy measured (``plain_ms``).
The target verifies every draft, so no choice here changes the text: only the speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from specscribe.models.draft import draft_group
from specscribe.models.interfaces import LogitRules
from specscribe.models.types import SpecStats

if TYPE_CHECKING:
    from specscribe.models.draft import DraftDecoder
    from specscribe.models.drafters import Drafter
    from specscribe.models.speculative import SpecOptions

ARMS = ("none", "ngram", "decoder", "hypothesis+ngram", "hypothesis+decoder")


def fixed_arm(kind: str, hypothesis: Sequence[int], draft: "DraftDecoder | None", language: str = "en",
              task: str = "transcribe") -> str:
    """The arm `--draft kind` plays (kind: none | ngram | decoder | auto).

    auto: with a previous hypothesis (a streaming re-decode), the hypothesis chained with n-gram
    lookup: what a re-decode adds after the hypothesis is a few tokens and end-of-text, where the
    draft decoder's steps cost more than they save (scripts/bench_streaming.py). Without one, the
    draft decoder when the engine loaded one and its card says it pays for this language and task
    (``DraftDecoder.pays_for``), else none: n-gram lookup alone accepts next to nothing in a first
    decode. decoder / ngram: the previous hypothesis first too, when given (it is nearly free and
    nearly perfect on re-decodes); decoder without a draft loaded is n-gram lookup.
    """
    if kind not in ("auto", "none", "decoder", "ngram"):
        raise ValueError(f"unknown drafter {kind!r}; choose auto, none, decoder or ngram")
    if kind == "none":
        return "none"
    if kind == "auto":
        if hypothesis:
            return "hypothesis+ngram"
        return "decoder" if draft is not None and draft.pays_for(language, task) else "none"
    base = "decoder" if kind == "decoder" and draft is not None else "ngram"
    return f"hypothesis+{base}" if hypothesis else base


def auto_arms(hypothesis: Sequence[int], draft: "DraftDecoder | None", first: str) -> tuple[str, ...]:
    """The arms the measured policy chooses among for a decode, ``first`` (the fixed rule's) first."""
    arms = ("hypothesis+ngram", "hypothesis+decoder", "none") if hypothesis else ("decoder", "ngram", "none")
    arms = tuple(a for a in arms if draft is not None or not a.endswith("decoder"))
    return (first, *(a for a in arms if a != first))


def make_drafter(arm: str, hypothesis: Sequence[int], draft: "DraftDecoder | None", enc: torch.Tensor,
                 rules: LogitRules, eot: int, target_cross: list | None = None) -> "Drafter | None":
    """The drafter of one arm for one decode (None for "none")."""
    from specscribe.models.draft import DraftDecoderDrafter
    from specscribe.models.drafters import ChainDrafter, NgramDrafter, PreviousHypothesisDrafter

    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; one of {', '.join(ARMS)}")
    if arm == "none":
        return None
    if arm.endswith("decoder") and draft is None:
        raise ValueError(f"arm {arm!r} needs a draft decoder")
    if arm.endswith("ngram"):
        base = NgramDrafter()
    elif draft.is_feature:
        from specscribe.models.feature_draft import FeatureDrafter

        base = FeatureDrafter(draft, enc, rules, eot, target_cross)
    else:
        base = DraftDecoderDrafter(draft, enc, rules, eot, target_cross)
    return ChainDrafter([PreviousHypothesisDrafter(hypothesis), base]) if arm.startswith("hypothesis") else base


def build_drafter(kind: str, hypothesis: Sequence[int], draft: "DraftDecoder | None", enc: torch.Tensor,
                  rules: LogitRules, eot: int, target_cross: list | None = None, language: str = "en",
                  task: str = "transcribe") -> "Drafter | None":
    """The drafter `--draft kind` gives one decode under the fixed rule (``fixed_arm``)."""
    return make_drafter(fixed_arm(kind, hypothesis, draft, language, task), hypothesis, draft, enc, rules, eot,
                        target_cross)


def decode_reward(stats: SpecStats) -> tuple[int, float]:
    """(tokens, ms of all its target passes and drafting) of a decode."""
    return stats.tokens, stats.verify_ms + stats.draft_ms


@dataclass(frozen=True)
class PolicyOptions:
    """The bandit's settings.

    Attributes:
        discount: per decode observed in a context, the weight left to everything before it
            (0.95: about the last 20 decodes count).
        explore: the optimism bonus's scale (relative to the arm's value).
        min_tokens: decodes with fewer tokens than this teach nothing (timing noise).
        prior_margin: how much better than the fixed rule's arm (the first of ``arms``) another must
            measure to be played instead. One decode's reward varies about 3x with its audio, so ~20
            samples cannot tell arms 10 % apart: replaying live re-decodes, the rule's arm was 1.1x the
            other's, and without a margin the bandit settled on the slower one in some runs.
    """

    discount: float = 0.95
    explore: float = 0.1
    min_tokens: int = 5
    prior_margin: float = 0.15


@dataclass(frozen=True)
class PolicyContext:
    """Where an arm's reward was earned: language group ("en" or "xx") and task, re-decode or first
    decode, alone or sharing passes with other decodes."""

    group: str
    redecode: bool
    shared: bool

    @classmethod
    def of(cls, language: str, task: str, redecode: bool, shared: bool) -> "PolicyContext":
        return cls(draft_group(language, task), redecode, shared)

    def label(self) -> str:
        return f"{self.group}/{'redecode' if self.redecode else 'first'}/{'shared' if self.shared else 'alone'}"


@dataclass
class _Arm:
    plays: float = 0.0  # discounted counts of observed decodes
    tokens: float = 0.0
    ms: float = 0.0
    in_flight: int = 0  # chosen, not yet observed
    total: int = 0  # decodes observed, undiscounted

    @property
    def value(self) -> float | None:
        return self.tokens / self.ms if self.ms > 0 else None


@dataclass
class Choice:
    """One decode's arm: a handle to give back to ``DraftPolicy.done`` (once)."""

    context: PolicyContext
    arm: str
    open: bool = True


class DraftPolicy:
    """The measured drafting policy of one engine (see the module docstring). Owned by the engine's
    thread, like the model: no locking."""

    def __init__(self, options: PolicyOptions = PolicyOptions()):
        if not 0 < options.discount <= 1 or options.explore < 0 or options.prior_margin < 0:
            raise ValueError("need 0 < discount <= 1, explore >= 0 and prior_margin >= 0")
        self.options = options
        self._contexts: dict[PolicyContext, dict[str, _Arm]] = {}

    def choose(self, context: PolicyContext, arms: Sequence[str]) -> Choice:
        """The arm this decode plays, among ``arms`` (in prior order)."""
        if not arms:
            raise ValueError("no arms to choose among")
        table = self._contexts.setdefault(context, {})
        stats = [table.setdefault(a, _Arm()) for a in arms]
        untried = [a for a, s in zip(arms, stats) if s.value is None and s.in_flight == 0]
        if untried:
            arm = untried[0]
        else:
            known = [(a, s) for a, s in zip(arms, stats) if s.value is not None]
            if not known:  # every arm in flight, none observed yet: the prior's pick
                arm = arms[0]
            else:
                total = sum(s.plays + s.in_flight for s in stats)
                log_n = math.log(max(total, 1.0))
                def score(item: tuple[str, _Arm]) -> float:
                    arm, s = item
                    bound = s.value * (1 + self.options.explore * math.sqrt(log_n / max(s.plays + s.in_flight, 1e-9)))
                    return bound * (1 + self.options.prior_margin) if arm == arms[0] else bound

                arm = max(known, key=score)[0]
        table[arm].in_flight += 1
        return Choice(context, arm)

    def done(self, choice: Choice, stats: SpecStats | None) -> None:
        """The decode of ``choice`` ended (stats: its counters), or was dropped (stats None).
        A second call for the same choice is ignored."""
        if not choice.open:
            return
        choice.open = False
        table = self._contexts[choice.context]
        table[choice.arm].in_flight -= 1
        if stats is None:
            return
        tokens, ms = decode_reward(stats)
        if tokens < self.options.min_tokens or ms <= 0:
            return
        g = self.options.discount
        for s in table.values():
            s.plays, s.tokens, s.ms = s.plays * g, s.tokens * g, s.ms * g
        played = table[choice.arm]
        played.plays += 1
        played.tokens += tokens
        played.ms += ms
        played.total += 1

    def plain_ms(self, context: PolicyContext) -> float | None:
        """What a plain step costs in ``context``: the "none" arm's measured ms per token (one token
        per pass), None before it was measured. Drafting decodes price their rounds with it
        (SpecOptions.plain_ms), so a draft that does not pay switches itself off within a decode."""
        arm = self._contexts.get(context, {}).get("none")
        value = None if arm is None else arm.value
        return None if value is None else 1.0 / value

    def summary(self) -> dict[str, dict[str, dict]]:
        """{context label: {arm: decodes observed, discounted weight, tokens per ms}} (benchmarks, logs)."""
        return {
            ctx.label(): {arm: {"decodes": s.total, "weight": round(s.plays, 2),
                                "tokens_per_ms": None if s.value is None else round(s.value, 4)}
                          for arm, s in table.items()}
            for ctx, table in self._contexts.items()
        }


class DraftLength:
    """The adaptive draft length and the on/off switch for one decode.

    k grows by 2 after a fully accepted draft and shrinks by 1 after a rejection, within bounds; with
    SpecOptions.k_steps "multiplicative" (lookup drafts, such as a re-decode's previous hypothesis) it
    doubles, or halves but keeps the accepted length plus one: after a hypothesis diverged, its
    re-synced runs are short, and each rejected row still costs the target pass a row.
    Cost model: a plain step costs ``plain_ms`` (measured on this decode's plain steps; before
    any, ``options.plain_ms`` when given, else this round's verify time, which is an overestimate
    where k+1 rows cost more than one); drafting costs what it measured. A
    speculative round saves ``emitted * plain_ms - (verify_ms + draft_ms)``. When the saving summed
    since the last (re)start is negative after ``min_rounds`` rounds, speculation switches off for
    ``probe_after`` plain steps, then comes back at k_init (the pause doubles on each switch-off).
    """

    def __init__(self, options: SpecOptions):
        if options.k_steps not in ("additive", "multiplicative"):
            raise ValueError(f"unknown k_steps {options.k_steps!r}; choose additive or multiplicative")
        self.options = options
        self.k = options.k_init
        self.off_steps = 0  # plain steps left before the next probe
        self.pause = options.probe_after
        self.switch_offs = 0
        self.plain_ms: float | None = options.plain_ms
        self._measured_plain = False
        self._saved_ms = 0.0
        self._rounds = 0

    @property
    def enabled(self) -> bool:
        return self.off_steps == 0

    def next_k(self) -> int:
        return self.k if self.enabled else 0

    def _next_k(self, drafted: int, accepted: int) -> int:
        """k after a round that drafted ``drafted`` tokens and had ``accepted`` of them accepted."""
        opts, k = self.options, self.k
        if opts.k_steps == "multiplicative":
            k = 2 * k if accepted == drafted else min(k - 1, max(accepted + 1, k // 2))
        else:
            k = k + 2 if accepted == drafted else k - 1
        return max(opts.k_min, min(opts.k_max, k))

    def update(
        self, drafted: int, accepted: int, emitted: int, verify_ms: float, draft_ms: float, measure: bool = True
    ) -> None:
        """After a round. measure=False (the prompt pass, far costlier than a step) adapts k only."""
        opts = self.options
        if drafted == 0 and not measure:
            return
        if drafted == 0:  # a plain step: measure the 1-token pass, count down a pause
            self.plain_ms = 0.8 * self.plain_ms + 0.2 * verify_ms if self._measured_plain else verify_ms
            self._measured_plain = True
            if self.off_steps > 0:
                self.off_steps -= 1
                if self.off_steps == 0:
                    self.k, self._saved_ms, self._rounds = opts.k_init, 0.0, 0
            return
        if not opts.adaptive:
            return
        self.k = self._next_k(drafted, accepted)
        if not measure:
            return
        unit = self.plain_ms if self.plain_ms is not None else verify_ms
        self._saved_ms += emitted * unit - (verify_ms + draft_ms)
        self._rounds += 1
        if self._rounds >= opts.min_rounds and self._saved_ms < 0:
            self.off_steps = self.pause
            self.pause *= 2
            self.switch_offs += 1
