"""Caption lines: a stream's finals grouped the way broadcast captions are cut.

Finals stay small, immutable and fast (a few words each, as soon as they are sure). People read
captions as lines, so each session also groups its finals into lines and says where one ends (a
`line` event, docs/protocol.md). A line ends:
- after a final that ends a sentence, or a clause (a comma ... or "...") once the line fills a row (`clause_chars`);
- after a final that leaves no room for another word, or that brings it near `max_seconds`;
- at a pause: `pause` seconds of silence after its last word (nothing held back), or a gap as long
  before the next final;
- before a final that would not fit (`max_chars`, `max_seconds`) or is in another language.
A final is never split across lines; the session cuts a long commit into several finals instead
(`LineBreaker.split`: after each sentence end, before a line's length). The page, `live`'s terminal
and its SRT/VTT files show these lines; batch transcripts keep Whisper's segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from specscribe.models.types import Word
from specscribe.pipeline.policy import ELLIPSES, ends_sentence, ends_with_mark

if TYPE_CHECKING:  # pipeline/types.py imports LineOptions from here
    from specscribe.pipeline.types import CaptionEvent

CLAUSE_END = (",", ";", ":", "—", "，", "、", "；", "：", *ELLIPSES)  # "..." ends no sentence (policy.ends_sentence)
NO_SPACE_LANGUAGES = frozenset({"zh", "yue", "ja", "th", "lo", "my", "km", "bo"})  # written without spaces


@dataclass(frozen=True)
class LineOptions:
    """Where lines are cut.

    Attributes:
        max_chars: characters a line holds at most: two rows of 42, the common broadcast limit.
        max_chars_no_space: the same for languages written without spaces (two rows of 16).
        max_seconds: seconds a line spans at most (subtitle guides: 7).
        clause_chars: a clause end (comma, semicolon, ...) ends a line this long (one full row).
        pause: seconds between a line's last word and the next final's first that start a new line.
    """

    max_chars: int = 84
    max_chars_no_space: int = 32
    max_seconds: float = 7.0
    clause_chars: int = 42
    pause: float = 1.0

    def __post_init__(self) -> None:
        if min(self.max_chars, self.max_chars_no_space, self.clause_chars) < 1 or min(self.max_seconds, self.pause) <= 0:
            raise ValueError(f"line limits must be positive: {self}")


@dataclass(frozen=True)
class CaptionLine:
    """A finished line: the finals from the one after the previous line's `last_id` to `last_id`."""

    last_id: int
    start: float
    end: float
    text: str
    language: str | None


def join_texts(texts: list[str], language: str | None) -> str:
    """Finals' texts as one line: with spaces, except in languages written without them."""
    return ("" if language in NO_SPACE_LANGUAGES else " ").join(t for t in texts if t)


class LineBreaker:
    """Groups one stream's finals into lines. `add` each final in order; `idle` while nothing is
    spoken (or held back); `flush` when a pause has become an end, and at the stream's end. Each returns the lines that ended, oldest first."""

    def __init__(self, options: LineOptions = LineOptions()) -> None:
        self.options = options
        self._finals: list[CaptionEvent] = []  # the open line's finals

    @property
    def open_text(self) -> str:
        return self._text(self._finals)

    def add(self, final: CaptionEvent) -> list[CaptionLine]:
        done = []
        if self._finals and self._breaks_before(final):
            done.append(self._close())
        self._finals.append(final)
        if self._ends_after():
            done.append(self._close())
        return done

    def idle(self, now: float) -> list[CaptionLine]:
        """No speech since the open line's last word: it ends once `pause` seconds have passed (now: stream seconds)."""
        if self._finals and now - (self._finals[-1].end or 0.0) >= self.options.pause:
            return self.flush()
        return []

    def split(self, words: Sequence[Word], language: str | None) -> list[tuple[Word, ...]]:
        """A commit's words as finals: cut after a sentence end that more words follow, and before a word
        that would take the final past a line; so lines can end where sentences do, and no final outgrows
        a line (one word longer than a line stays whole)."""
        limit, pieces, piece = self._limit(language), [], []
        for word in words:
            if piece and len("".join(w.text for w in piece + [word]).strip()) > limit:
                pieces.append(tuple(piece))
                piece = []
            piece.append(word)
            if ends_sentence(word.text):
                pieces.append(tuple(piece))
                piece = []
        return pieces + ([tuple(piece)] if piece else [])

    def flush(self) -> list[CaptionLine]:
        """A pause or the stream's end: the open line, if any, ends."""
        return [self._close()] if self._finals else []

    def _limit(self, language: str | None) -> int:
        o = self.options
        return o.max_chars_no_space if language in NO_SPACE_LANGUAGES else o.max_chars

    def _text(self, finals: list[CaptionEvent]) -> str:
        return join_texts([f.text for f in finals], finals[0].language if finals else None)

    def _breaks_before(self, final: CaptionEvent) -> bool:
        first, last = self._finals[0], self._finals[-1]
        if final.language != first.language:
            return True
        if (final.start or 0.0) - (last.end or 0.0) >= self.options.pause:
            return True
        if (final.end or 0.0) - (first.start or 0.0) > self.options.max_seconds:
            return True
        return len(self._text(self._finals + [final])) > self._limit(first.language)

    def _ends_after(self) -> bool:
        o, first, last = self.options, self._finals[0], self._finals[-1]
        text = self._text(self._finals)
        limit = self._limit(first.language)
        room = max(2, limit // 8)  # no room left for a typical word (about 10 characters of 84)
        if ends_sentence(last.text) or len(text) > limit - room:
            return True
        if ends_with_mark(last.text, CLAUSE_END) and len(text) >= min(o.clause_chars, limit // 2):
            return True
        return (last.end or 0.0) - (first.start or 0.0) > o.max_seconds - 1.0

    def _close(self) -> CaptionLine:
        finals, self._finals = self._finals, []
        return CaptionLine(finals[-1].id or 0, finals[0].start or 0.0, finals[-1].end or 0.0,
                           self._text(finals), finals[0].language)
