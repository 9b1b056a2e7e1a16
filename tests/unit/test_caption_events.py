"""pipeline/caption_events.py: finals numbered in order and handed on, a sentence end splits a commit
into two finals with a line after the first, partials sent only when they change."""

from __future__ import annotations

from specscribe.models.types import Word
from specscribe.pipeline.caption_events import CaptionEvents
from specscribe.pipeline.lines import LineOptions
from specscribe.pipeline.policy import PolicyUpdate
from specscribe.pipeline.types import CaptionEvent


def make(interim: bool = True):
    handed: list[tuple[int, str]] = []
    captions = CaptionEvents(LineOptions(), interim, lambda type_, **f: CaptionEvent(type=type_, emitted_at=0.0, **f),
                             lambda i, words, language: handed.append((i, "".join(w.text for w in words))))
    return captions, handed


def words(*spec: tuple[float, str]) -> tuple[Word, ...]:
    return tuple(Word(t, t + 0.3, text, 0.9) for t, text in spec)


def test_a_commit_with_a_sentence_end_is_two_finals_and_a_line():
    captions, handed = make()
    update = PolicyUpdate(committed=words((0.0, " It rained."), (0.5, " We left")), partial=words((0.9, " early")),
                          buffer_start=0.0)
    events = captions.emit(update, 1.5, "en")
    assert [(e.type, e.text) for e in events] == [
        ("final", "It rained."), ("line", "It rained."), ("final", "We left"), ("partial", "early")]
    assert [e.id for e in events if e.type == "final"] == [0, 1] and captions.finals == 2
    assert handed == [(0, " It rained."), (1, " We left")] and captions.text_language == "en"
    assert [(e.type, e.text) for e in captions.flush()] == [("line", "We left")]


def test_a_partial_is_sent_when_it_changes_and_a_cleared_one_sits_at_the_audio_end():
    captions, _ = make()
    same = PolicyUpdate(committed=(), partial=words((0.0, " Hello")), buffer_start=0.0)
    assert [e.type for e in captions.emit(same, 0.5, "en")] == ["partial"]
    assert captions.emit(same, 1.0, "en") == []  # unchanged: nothing sent
    cleared = captions.emit(PolicyUpdate(committed=(), partial=(), buffer_start=0.0), 2.0, "en")
    assert [(e.type, e.text, e.start, e.end) for e in cleared] == [("partial", "", 2.0, 2.0)]
    assert captions.text_language is None  # no final yet
    quiet, _ = make(interim=False)
    assert quiet.emit(same, 0.5, "en") == []
