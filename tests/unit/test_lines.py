"""Caption lines (pipeline/lines.py): where a stream's finals are grouped into lines."""

import pytest

from specscribe.models.types import Word
from specscribe.pipeline.lines import LineBreaker, LineOptions, join_texts
from specscribe.pipeline.types import CaptionEvent


class Finals:
    """Finals with ids in order, each starting where the last ended (plus `gap`)."""

    def __init__(self) -> None:
        self.id, self.t = 0, 0.0

    def __call__(self, text: str, seconds: float = 1.0, gap: float = 0.0, language: str = "en") -> CaptionEvent:
        start = self.t + gap
        event = CaptionEvent("final", 0.0, id=self.id, start=start, end=start + seconds, text=text, language=language)
        self.id, self.t = self.id + 1, start + seconds
        return event


def feed(breaker: LineBreaker, finals: list[CaptionEvent]) -> list[tuple[int, str]]:
    lines = [line for f in finals for line in breaker.add(f)]
    return [(line.last_id, line.text) for line in lines]


def test_a_sentence_end_ends_the_line_and_words_before_it_wait():
    f, b = Finals(), LineBreaker()
    assert feed(b, [f("And so, my"), f("fellow Americans,")]) == []  # a short clause does not end a line
    assert b.open_text == "And so, my fellow Americans,"
    assert feed(b, [f("ask not.")]) == [(2, "And so, my fellow Americans, ask not.")]
    assert b.open_text == ""


@pytest.mark.parametrize("text", ['he asked "why?"', "Really?!", "Stop!", "她说。", "Wirklich?»"])
def test_sentence_marks_inside_closing_quotes_end_a_line(text):
    f = Finals()
    assert feed(LineBreaker(), [f(text)]) == [(0, text)]


def test_a_clause_end_ends_a_line_only_once_it_fills_a_row():
    f, b = Finals(), LineBreaker(LineOptions(clause_chars=30))
    assert feed(b, [f("Well,")]) == []
    assert feed(b, [f("we choose to go to the moon;")]) == [(1, "Well, we choose to go to the moon;")]


def test_a_final_that_would_overflow_the_line_starts_the_next():
    f, b = Finals(), LineBreaker(LineOptions(max_chars=40))
    assert feed(b, [f("we choose to go to the moon")]) == []  # 27 characters
    # 27 + 1 + 19 > 40: the open line ends before this final, which opens the next line
    assert feed(b, [f("in this decade and")]) == [(0, "we choose to go to the moon")]
    assert b.open_text == "in this decade and"


def test_a_nearly_full_line_ends_at_once():
    f, b = Finals(), LineBreaker(LineOptions(max_chars=40))  # room for a word: 40 // 8 = 5 characters
    assert feed(b, [f("x" * 35)]) == []  # 5 left: a four-letter word still fits
    b.flush()
    assert feed(b, [f("y" * 36)]) == [(1, "y" * 36)]


def test_a_final_longer_than_a_line_is_a_line_of_its_own():
    f, b = Finals(), LineBreaker(LineOptions(max_chars=20))
    long = "this one final says more than a line holds"
    assert feed(b, [f("short"), f(long), f("next")]) == [(0, "short"), (1, long)]
    assert b.open_text == "next"


def test_duration_limits_a_line():
    f, b = Finals(), LineBreaker(LineOptions(max_seconds=7.0))
    assert feed(b, [f("one", 2.0), f("two", 2.0), f("three", 2.0)]) == []  # 6 s: under 7 - 1
    assert feed(b, [f("four", 2.0)]) == [(2, "one two three")]  # 8 s would be over 7: before it
    # 2 + 6.5 s would be over 7: "four" ends before it; alone, 6.5 s is near the limit: it ends at once
    assert feed(b, [f("slow words", 6.5)]) == [(3, "four"), (4, "slow words")]


def test_a_gap_starts_a_new_line_and_flush_ends_one():
    f, b = Finals(), LineBreaker(LineOptions(pause=1.0))
    assert feed(b, [f("before the"), f("pause", gap=0.9)]) == []
    assert feed(b, [f("after it", gap=1.2)]) == [(1, "before the pause")]
    assert [(line.last_id, line.text) for line in b.flush()] == [(2, "after it")]
    assert b.flush() == []


def test_a_new_language_starts_a_new_line():
    f, b = Finals(), LineBreaker()
    assert feed(b, [f("and now", language="en"), f("auf Deutsch", language="de")]) == [(0, "and now")]
    line = b.flush()[0]
    assert (line.text, line.language) == ("auf Deutsch", "de")


def test_languages_without_spaces_join_without_them_and_have_shorter_lines():
    f, b = Finals(), LineBreaker(LineOptions(max_chars_no_space=12))
    assert feed(b, [f("我们选择", language="zh"), f("登上月球", language="zh")]) == []
    assert b.open_text == "我们选择登上月球"
    assert feed(b, [f("在这个十年", language="zh")]) == [(1, "我们选择登上月球")]
    assert join_texts(["a", "", "b"], "en") == "a b"


def test_line_times_span_their_finals():
    f, b = Finals(), LineBreaker()
    b.add(f("first words", 1.5, gap=3.0))
    line = b.add(f("then the end.", 1.0, gap=0.2))[0]
    assert (line.start, line.end) == pytest.approx((3.0, 5.7))


def test_options_are_checked():
    with pytest.raises(ValueError, match="positive"):
        LineOptions(max_chars=0)


def _words(text: str) -> list[Word]:
    return [Word(i * 0.3, i * 0.3 + 0.25, " " + t) for i, t in enumerate(text.split())]


def test_a_commit_is_cut_into_finals_after_sentence_ends_and_before_a_line_is_full():
    b = LineBreaker(LineOptions(max_chars=24))
    pieces = b.split(_words("Ask not. What your country can do for you, ask"), "en")
    assert ["".join(w.text for w in p).strip() for p in pieces] == ["Ask not.", "What your country can do", "for you, ask"]
    assert b.split([], "en") == []
    assert [len(p) for p in b.split(_words("Supercalifragilisticexpialidocious-ly yes"), "en")] == [1, 1]


def test_abbreviations_and_initials_do_not_end_a_sentence():
    b = LineBreaker()
    pieces = b.split(_words("And Mr. J. Dashwood met Dr. Smith, e.g. at St. Paul's. Then"), "en")
    assert ["".join(w.text for w in p).strip() for p in pieces] == [
        "And Mr. J. Dashwood met Dr. Smith, e.g. at St. Paul's.", "Then"]
    f = Finals()
    assert feed(LineBreaker(), [f("Ask Mr."), f("Smith.")]) == [(1, "Ask Mr. Smith.")]


def test_an_ellipsis_is_a_clause_end_not_a_sentence_end():
    """Whisper writes "..." where the audio it heard stops inside speech: a streamed final "into..." is followed by
    "kinetic energy." (the lecture), so a line does not end there unless it is already a row long."""
    f, b = Finals(), LineBreaker(LineOptions(clause_chars=30))
    assert feed(b, [f("energy into..."), f("kinetic energy.")]) == [(1, "energy into... kinetic energy.")]
    assert feed(b, [f("into...")]) == []  # short: the line goes on
    assert feed(b, [f("and then we turned it all back…")]) == [(3, "into... and then we turned it all back…")]
    pieces = b.split(_words("so you can... demolish a building. Then"), "en")
    assert ["".join(w.text for w in p).strip() for p in pieces] == ["so you can... demolish a building.", "Then"]
