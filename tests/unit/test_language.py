"""The stream language tracker (pipeline/language.py): evidence, lock, re-check with hysteresis, allow-list."""

from __future__ import annotations

import pytest

from specscribe.pipeline.language import LanguageOptions, LanguageState, LanguageTracker, restrict


def test_a_short_doubtful_start_does_not_lock():
    t = LanguageTracker()
    assert t.needs_detection and t.state == LanguageState()
    s = t.observe({"cy": 0.6, "en": 0.4}, 2.0)  # Welsh-looking first 2 s
    assert (s.language, s.locked) == ("cy", False)
    s = t.observe({"en": 0.9, "cy": 0.1}, 4.5)  # the same utterance, more of it: it supersedes
    assert (s.language, s.locked) == ("en", True) and abs(s.probability - 0.9) < 1e-9
    assert not t.needs_detection  # locked, and this utterance is past its first seconds
    t.new_utterance()
    assert t.needs_detection  # the next one is checked again


def test_the_lock_needs_both_seconds_and_probability():
    t = LanguageTracker(LanguageOptions(lock_seconds=4.0, lock_probability=0.8))
    assert not t.observe({"en": 0.99, "de": 0.01}, 3.0).locked  # confident, too little audio
    t.new_utterance()
    s = t.observe({"en": 0.3, "de": 0.7}, 1.5)  # enough audio now, but (0.99 * 3 + 0.3 * 1.5) / 4.5 = 0.76
    assert (s.language, s.locked) == ("en", False) and s.probability == pytest.approx(0.76)
    t.new_utterance()
    s = t.observe({"en": 0.95, "de": 0.05}, 2.0)
    assert s.locked and s.language == "en" and s.probability == pytest.approx((2.97 + 0.45 + 1.9) / 6.5)


def test_a_locked_stream_follows_a_speaker_who_switches_but_not_one_doubtful_utterance():
    t = LanguageTracker()
    t.observe({"en": 0.97, "de": 0.03}, 5.0)
    assert t.state.locked and t.state.language == "en"
    t.new_utterance()
    assert t.observe({"de": 0.8, "en": 0.2}, 3.0).language == "en"  # 0.8 < switch_probability: no flip
    assert t.decode_language == "en"
    t.new_utterance()
    assert t.observe({"de": 0.95, "en": 0.05}, 1.0).language == "en"  # too little of it yet to switch,
    assert t.decode_language == "de"  # but this utterance is decoded in the language it is sure of
    s = t.observe({"de": 0.95, "en": 0.05}, 2.5)
    assert (s.language, s.locked) == ("de", True)
    assert not t.needs_detection  # this utterance has been checked
    t.new_utterance()
    assert t.needs_detection


def test_the_allow_list_restricts_and_renormalizes():
    assert restrict({"cy": 0.6, "en": 0.3, "de": 0.1}, ("en", "de")) == pytest.approx({"en": 0.75, "de": 0.25})
    assert restrict({"cy": 1.0}, ("en", "de")) == {"en": 0.5, "de": 0.5}
    assert restrict({"cy": 0.6, "en": 0.4}, ()) == {"cy": 0.6, "en": 0.4}
    t = LanguageTracker(LanguageOptions(allowed=("en", "de")))
    assert t.observe({"cy": 0.7, "en": 0.28, "de": 0.02}, 5.0).language == "en"
