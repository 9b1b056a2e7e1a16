"""Each of Whisper's logit rules (CTranslate2's order and semantics) on hand-made logits."""

from __future__ import annotations

import math

import torch

from specscribe.models.logits import RuleConfig, WhisperLogitRules, suppressed_token_ids

# vocab: 0..9 text, 10 eot, 11 sot, 12 notimestamps, 13..19 timestamps (0.00 .. 0.12 s)
V, EOT, NO_TS, TS = 20, 10, 12, 13


def rules(**kw) -> WhisperLogitRules:
    base = dict(n_vocab=V, eot=EOT, no_timestamps=NO_TS, suppress=(4,), suppress_begin=(5, EOT),
                timestamps=True, max_initial_timestamp_index=3)
    base.update(kw)
    return WhisperLogitRules(RuleConfig(**base))


def allowed(logits: torch.Tensor) -> set[int]:
    return {i for i in range(V) if math.isfinite(float(logits[i]))}


def flat() -> torch.Tensor:
    return torch.zeros(V)


def test_suppress_tokens_every_step_and_blank_only_first():
    r = rules(timestamps=False)
    first = allowed(r.apply(flat(), []))
    assert 4 not in first and 5 not in first and EOT not in first
    later = allowed(r.apply(flat(), [1, 2]))
    assert 4 not in later and 5 in later and EOT in later


def test_no_blank_suppression_when_off():
    r = rules(timestamps=False, suppress_begin=())
    assert {5, EOT} <= allowed(r.apply(flat(), []))


def test_first_step_only_early_timestamps():
    r = rules()
    assert allowed(r.apply(flat(), [])) == {TS, TS + 1, TS + 2, TS + 3}


def test_notimestamps_always_suppressed_with_timestamps():
    r = rules()
    assert NO_TS not in allowed(r.apply(flat(), [TS, 1]))


def test_timestamps_off_leaves_timestamp_tokens_alone():
    r = rules(timestamps=False)
    got = allowed(r.apply(flat(), [1]))
    assert NO_TS in got and TS + 6 in got


def test_after_a_pair_only_text_or_eot():
    r = rules()
    logits = flat()
    logits[TS + 5] = 50.0  # the model would love another timestamp
    got = allowed(r.apply(logits, [TS, 1, TS + 2, TS + 2]))
    assert got == {0, 1, 2, 3, 5, 6, 7, 8, 9, EOT, 11}  # 4 and notimestamps suppressed
    # a lone first timestamp counts as a pair too (CTranslate2: penultimate = last)
    assert TS not in allowed(r.apply(flat(), [TS]))


def test_after_single_timestamp_no_text():
    r = rules()
    logits = flat()
    logits[EOT] = 5.0  # end-of-text likelier than all timestamps together: nothing forced
    got = allowed(r.apply(logits, [TS, 1, 2, TS + 3]))
    assert not any(t in got for t in range(EOT))  # no text tokens
    assert EOT in got and TS + 3 in got  # CTranslate2 allows repeating the same timestamp
    assert TS + 2 not in got  # monotonic


def test_timestamps_never_decrease_and_a_segment_ends_after_its_start():
    """CTranslate2 4.x and openai/whisper: after text, the closing timestamp is later than the segment's start
    (a zero-length segment can loop); only a new segment may start where the last one ended."""
    r = rules()
    got = allowed(r.apply(flat(), [TS + 1, 1, 2, TS + 4, TS + 4, 3]))
    assert {TS, TS + 1, TS + 2, TS + 3, TS + 4} & got == set()
    assert {TS + 5, TS + 6} <= got
    assert TS + 2 not in allowed(r.apply(flat(), [TS + 2, 1]))  # the segment [TS+2, TS+2] would be empty
    assert {TS + 2, TS + 3} <= allowed(r.apply(flat(), [TS, 1, TS + 2]))  # the next segment may start at its end


def test_timestamp_mass_beats_best_text():
    r = rules()
    logits = torch.full((V,), -10.0)
    logits[1] = 0.0  # best text token
    logits[TS + 2 : V] = -0.5  # 5 timestamps at -0.5 each: total mass beats token 1
    got = allowed(r.apply(logits, [TS, 1]))
    assert got == set(range(TS + 1, V))  # only timestamps, after the segment's start (TS)
    logits[TS + 2 : V] = -3.0  # now text wins: nothing forced
    got = allowed(r.apply(logits, [TS, 1]))
    assert 1 in got and TS + 2 in got


def test_mass_rule_uses_logits_after_suppression():
    r = rules(suppress=(1,))
    logits = torch.full((V,), -10.0)
    logits[1] = 5.0  # suppressed, so it must not count as the best text token
    logits[2] = -2.0
    logits[TS + 1 : V] = -1.0
    got = allowed(r.apply(logits, [TS, 3]))
    assert got == set(range(TS + 1, V))


def test_apply_does_not_modify_input():
    r = rules()
    logits = torch.randn(V)
    before = logits.clone()
    r.apply(logits, [TS, 1])
    assert torch.equal(logits, before)


def test_suppressed_token_ids_like_faster_whisper():
    specials = (50, 51)
    assert suppressed_token_ids((-1,), (7, 3), specials) == (3, 7, 50, 51)
    assert suppressed_token_ids((9, -1), (7,), specials) == (7, 9, 50, 51)
    assert suppressed_token_ids((9,), (7,), specials) == (9, 50, 51)
    assert suppressed_token_ids((), (7,), specials) == ()
