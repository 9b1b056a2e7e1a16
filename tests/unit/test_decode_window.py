"""pipeline/decode_window.py: a live decode's window, prompt and detector audio, with fake policy, captions
and language tracker (the session tests drive it through StreamSession)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specscribe.models.types import Word
from specscribe.pipeline.decode_window import LANGUAGE_MARGIN, DecodeWindow, choose_window, own_start


class FakePolicy:
    """window() as LocalAgreement's: the buffer start and the committed text before it (after `since`)."""

    def __init__(self, start: float, prompt: str, partial: list[Word] = ()) -> None:
        self.start, self.prompt, self.partial, self.asked = start, prompt, list(partial), []

    def window(self, since: float = 0.0) -> tuple[float, str]:
        self.asked.append(since)
        return self.start, self.prompt


def captions(language: str | None = "en", since: float = 0.0):
    return SimpleNamespace(text_language=language, text_since=since)


def tracker(locked: bool = True, detecting: bool = False):
    return SimpleNamespace(state=SimpleNamespace(locked=locked), needs_detection=detecting)


def choose(policy, caps=None, track=None, language="en", utterance=6.0, keep=True, apart=True) -> DecodeWindow:
    return choose_window(policy, caps or captions(), track, language, utterance, keep, apart)


def test_the_policy_window_with_its_prompt_when_nothing_narrows_it():
    assert choose(FakePolicy(2.0, " Hello there.")) == DecodeWindow(2.0, " Hello there.", 0.0)
    assert choose(FakePolicy(2.0, " Hi."), track=tracker(locked=True)) == DecodeWindow(2.0, " Hi.")


def test_under_load_no_context_is_decoded_but_the_prompt_stays():
    assert choose(FakePolicy(2.0, " Hi."), keep=False) == DecodeWindow(6.0, " Hi.")


def test_finals_in_another_language_give_no_prompt_and_no_context():
    window = choose(FakePolicy(2.0, " Hallo."), caps=captions("de"), language="en")
    assert window == DecodeWindow(6.0, "")


def test_a_detecting_decode_keeps_its_context_and_the_detector_hears_the_utterance():
    detecting = tracker(locked=False, detecting=True)
    assert choose(FakePolicy(2.0, " Hi."), track=detecting) == DecodeWindow(2.0, " Hi.", 6.0)
    assert choose(FakePolicy(2.0, " Hi."), track=detecting, apart=False) == DecodeWindow(6.0, " Hi.")


def test_after_a_change_of_language_the_window_starts_at_its_first_final_once_locked():
    policy = FakePolicy(2.0, " Guten Tag.")
    assert choose(policy, caps=captions("de", since=4.0), language="de", track=tracker(locked=True)).start == \
        pytest.approx(4.0 - LANGUAGE_MARGIN)
    assert policy.asked == [4.0]  # the prompt is only text in the new language
    # not locked yet: the change may be a first guess corrected, and the detector needs the audio before it
    assert choose(policy, caps=captions("de", since=4.0), language="de", track=tracker(locked=False)).start == 2.0


def test_own_start_keeps_words_held_over_a_pause():
    held = [Word(4.5, 5.0, " so", 0.3)]
    assert own_start(2.0, 6.0, held) == 4.5
    assert own_start(2.0, 6.0, []) == 6.0
    assert own_start(7.0, 6.0, held) == 7.0  # never before the window it narrows
