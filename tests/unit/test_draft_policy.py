"""The drafting policy (models/draft_policy.py): the fixed rule, the bandit's choices from scripted
rewards, and the first-pass split of a decode's timings that its reward rests on."""

from __future__ import annotations

import pytest
from test_speculative import EOT, PROMPT, FakeClock, NoRules, ScriptDrafter, TableSession, oracle, story

from specscribe.models.draft_policy import (
    DraftLength,
    DraftPolicy,
    PolicyContext,
    PolicyOptions,
    auto_arms,
    decode_reward,
    fixed_arm,
)
from specscribe.models.speculative import SpecOptions, generate
from specscribe.models.types import SpecStats

EN = PolicyContext.of("en", "transcribe", redecode=False, shared=False)
ARMS = ("decoder", "ngram", "none")


class Card:
    """A DraftDecoder as far as the rule is concerned: pays for English only."""

    is_feature = False

    def pays_for(self, language: str, task: str) -> bool:
        return language == "en"


def stats(tokens: int, ms: float) -> SpecStats:
    """A plain decode that emitted ``tokens`` in ``ms``, its prompt pass included."""
    return SpecStats(target_passes=tokens, tokens=tokens, verify_ms=ms, prefill_ms=ms / tokens)


def play(policy: DraftPolicy, speed: dict[str, float], n: int, context=EN, arms=ARMS) -> list[str]:
    """n decodes one after another, each arm's decode emitting 40 tokens at ``speed[arm]`` tokens/ms."""
    played = []
    for _ in range(n):
        choice = policy.choose(context, arms)
        policy.done(choice, stats(40, 40 / speed[choice.arm]))
        played.append(choice.arm)
    return played


def test_fixed_rule_and_auto_arms():
    card = Card()
    assert fixed_arm("auto", (), card, "en") == "decoder"
    assert fixed_arm("auto", (), card, "de") == "none"
    assert fixed_arm("auto", (), None, "en") == "none"
    assert fixed_arm("auto", (1, 2), card, "en") == "hypothesis+ngram"
    assert fixed_arm("decoder", (1, 2), card) == "hypothesis+decoder"
    assert fixed_arm("decoder", (), None) == "ngram"
    assert fixed_arm("none", (1, 2), card) == "none"
    with pytest.raises(ValueError, match="unknown drafter"):
        fixed_arm("fast", (), card)
    assert auto_arms((), card, "none") == ("none", "decoder", "ngram")
    assert auto_arms((1,), card, "hypothesis+ngram") == ("hypothesis+ngram", "hypothesis+decoder", "none")
    assert auto_arms((1,), None, "hypothesis+ngram") == ("hypothesis+ngram", "none")  # no draft: no decoder arm


def test_tries_each_arm_once_in_prior_order_then_plays_the_fastest():
    policy = DraftPolicy()
    played = play(policy, {"decoder": 1.0, "ngram": 0.6, "none": 0.8}, 60)
    assert played[:3] == list(ARMS)
    assert played.count("decoder") >= 50
    assert played[3:8] == ["decoder"] * 5
    table = policy.summary()[EN.label()]
    assert table["decoder"]["tokens_per_ms"] == pytest.approx(1.0)
    assert table["ngram"]["decodes"] >= 1 and table["none"]["tokens_per_ms"] == pytest.approx(0.8)


def test_worse_arms_are_retried_now_and_then_and_a_change_is_followed():
    policy = DraftPolicy()
    first = play(policy, {"decoder": 1.0, "ngram": 0.5, "none": 0.85}, 120)
    assert first[3:].count("none") >= 2  # re-tried after the discount forgot it, not only once
    assert first[3:].count("decoder") > 90
    # the draft stops paying (e.g. a new speaker): the policy moves to plain decoding
    later = play(policy, {"decoder": 0.5, "ngram": 0.5, "none": 0.85}, 60)
    assert later[-30:].count("none") >= 25


def test_decodes_in_flight_spread_the_first_tries():
    policy = DraftPolicy()
    choices = [policy.choose(EN, ARMS) for _ in range(4)]  # a batch starts four decodes at once
    assert [c.arm for c in choices] == ["decoder", "ngram", "none", "decoder"]
    for c in choices:
        policy.done(c, stats(40, 40))
    assert policy.summary()[EN.label()]["decoder"]["decodes"] == 2


def test_contexts_learn_apart_and_short_or_dropped_decodes_teach_nothing():
    policy = DraftPolicy()
    de = PolicyContext.of("de", "transcribe", redecode=False, shared=False)
    play(policy, {"decoder": 1.0, "ngram": 0.1, "none": 0.5}, 10)
    play(policy, {"decoder": 0.1, "ngram": 0.1, "none": 0.5}, 10, context=de)
    assert policy.choose(EN, ARMS).arm == "decoder"
    assert policy.choose(de, ARMS).arm == "none"
    assert de.label() == "xx-transcribe/first/alone"
    fresh = DraftPolicy(PolicyOptions(min_tokens=5))
    short = fresh.choose(EN, ARMS)
    fresh.done(short, stats(4, 1.0))  # 4 tokens: timing noise
    dropped = fresh.choose(EN, ARMS)
    assert dropped.arm == "decoder"  # still untried, no longer in flight: first again
    assert fresh.choose(EN, ARMS).arm == "ngram"  # while that one is in flight, the next untried arm
    fresh.done(dropped, None)  # a cancelled decode
    fresh.done(dropped, stats(40, 1.0))  # handed back twice: ignored
    assert fresh.choose(EN, ARMS).arm == "decoder"
    assert all(arm["decodes"] == 0 for arm in fresh.summary()[EN.label()].values())


def test_bad_options_and_no_arms():
    with pytest.raises(ValueError):
        DraftPolicy(PolicyOptions(discount=0))
    with pytest.raises(ValueError):
        DraftPolicy().choose(EN, ())


def test_a_decodes_reward_counts_its_prompt_pass_and_drafter_start_up():
    clock = FakeClock()

    class SlowStart(ScriptDrafter):
        def begin(self, prompt, temperature=0.0, generator=None):
            super().begin(prompt, temperature, generator)
            clock.now += 0.005  # 5 ms: a draft decoder building its cross K/V

    sess = TableSession(story, clock=clock, pass_s=0.010)
    res = generate(sess, NoRules(), PROMPT, SlowStart(oracle(), clock, cost_s=0.001),
                   SpecOptions(eot=EOT, k_init=2, adaptive=False, max_new_tokens=20), clock=clock)
    st = res.stats
    assert st.prefill_ms == pytest.approx(10)  # the prompt pass (which verified 2 drafted tokens)
    assert st.verify_ms == pytest.approx(10 * st.target_passes)
    assert st.draft_ms == pytest.approx(5 + 1 * st.drafted)  # start-up + 1 ms per drafted token
    tokens, ms = decode_reward(st)
    assert tokens == st.tokens  # what the prompt pass's drafts added counts, and so does its time
    assert ms == pytest.approx(10 * st.target_passes + st.draft_ms)


def test_the_measured_plain_step_prices_a_decodes_rounds():
    policy = DraftPolicy()
    assert policy.plain_ms(EN) is None
    play(policy, {"decoder": 0.05, "ngram": 0.05, "none": 0.1}, 3)  # "none": 40 tokens in 400 ms
    assert policy.plain_ms(EN) == pytest.approx(10.0)
    # rounds that emit 2 tokens for a 12 ms verify pass (k+1 rows) and 10 ms of drafting: priced at
    # their own verify time they look like a saving (2 * 12 > 22), at the measured 10 ms a loss
    for hint, switched_off in ((None, False), (policy.plain_ms(EN), True)):
        ctl = DraftLength(SpecOptions(eot=EOT, k_init=4, min_rounds=4, plain_ms=hint))
        for _ in range(4):
            ctl.update(4, 1, 2, verify_ms=12, draft_ms=10)
        assert ctl.enabled is not switched_off
    ctl = DraftLength(SpecOptions(eot=EOT, plain_ms=10.0))
    ctl.update(0, 0, 1, verify_ms=14, draft_ms=0)  # the decode's own plain step replaces the hint
    assert ctl.plain_ms == pytest.approx(14)


def test_multiplicative_k_halves_on_a_rejection_keeps_what_was_accepted_and_doubles_on_a_full_run():
    """A lookup draft (a re-decode's previous hypothesis) after it diverged: its re-synced runs are short,
    and every rejected row costs the target pass a row, so k falls fast; a run that holds doubles it."""
    ctl = DraftLength(SpecOptions(eot=EOT, k_init=32, k_max=32, k_steps="multiplicative"))
    ctl.update(32, 3, 4, verify_ms=60, draft_ms=0, measure=False)  # the prompt pass: diverged after 3
    assert ctl.next_k() == 16
    ctl.update(16, 10, 11, verify_ms=40, draft_ms=0)
    assert ctl.next_k() == 11  # the accepted 10 + 1, more than half
    ctl.update(11, 0, 1, verify_ms=30, draft_ms=0)
    assert ctl.next_k() == 5
    ctl.update(5, 5, 6, verify_ms=25, draft_ms=0)
    assert ctl.next_k() == 10
    for _ in range(3):
        ctl.update(ctl.next_k(), ctl.next_k(), ctl.next_k() + 1, verify_ms=25, draft_ms=0)
    assert ctl.next_k() == 32  # bounded by k_max
    additive = DraftLength(SpecOptions(eot=EOT, k_init=32, k_max=32))
    additive.update(32, 3, 4, verify_ms=60, draft_ms=0, measure=False)
    assert additive.next_k() == 31  # the draft model's rule: one less
    with pytest.raises(ValueError, match="k_steps"):
        DraftLength(SpecOptions(eot=EOT, k_steps="geometric"))


def test_a_redecode_adapts_its_hypothesis_drafts_multiplicatively_where_rows_cost():
    from specscribe.models.spec_engine import hypothesis_spec_options

    for compute_type, k_steps in (("float32", "multiplicative"), ("int8_float32", "multiplicative"),
                                  ("bfloat16", "additive"), ("float16", "additive")):
        options = hypothesis_spec_options(EOT, list(range(40)), compute_type)
        assert options.k_steps == k_steps and options.k_init == options.k_max == 32


def test_the_fixed_rules_arm_stays_unless_another_is_clearly_faster():
    """Arms 8 % apart cannot be told apart from ~20 noisy decodes: the rule's arm (the first) keeps its
    place; one 40 % faster replaces it."""
    close = play(DraftPolicy(), {"decoder": 0.92, "ngram": 1.0, "none": 0.5}, 60)
    assert close[3:].count("decoder") >= 45
    no_margin = play(DraftPolicy(PolicyOptions(prior_margin=0)), {"decoder": 0.92, "ngram": 1.0, "none": 0.5}, 60)
    assert no_margin[3:].count("ngram") >= 45
    far = play(DraftPolicy(), {"decoder": 0.6, "ngram": 1.0, "none": 0.5}, 60)
    assert far[3:].count("ngram") >= 45
    with pytest.raises(ValueError, match="prior_margin"):
        DraftPolicy(PolicyOptions(prior_margin=-0.1))
