"""One stream's policy updates as caption events: `final` (committed words, numbered, never changed),
`line` (where a caption line ends: pipeline/lines.py) and `partial` (the current guess for the
uncommitted speech, sent when it changes). pipeline/session.py owns one per stream."""

from __future__ import annotations

from typing import Callable, Sequence

from specscribe.models.types import Word
from specscribe.pipeline.lines import CaptionLine, LineBreaker, LineOptions
from specscribe.pipeline.types import CaptionEvent


class CaptionEvents:
    """Attributes: finals (how many `final` events so far: the next one's id); text_language (the
    language of the last final, which the next decode's prompt is in); text_since (seconds: where the
    finals in text_language began, after a change of language; 0 before any change)."""

    def __init__(self, lines: LineOptions, interim_results: bool, event: Callable[..., CaptionEvent],
                 on_final: Callable[[int, Sequence[Word], str | None], None] | None = None) -> None:
        """event(type, **fields) makes an event (the session stamps its time); on_final(id, words,
        language) is told of every final (translations group them by language)."""
        self._lines = LineBreaker(lines)
        self._interim, self._event, self._on_final = interim_results, event, on_final
        self.finals = 0
        self.text_language: str | None = None
        self.text_since = 0.0
        self._last_partial = ""

    def emit(self, update, end_s: float, language: str | None,
             alternatives: Callable[[Sequence[Word]], tuple] | None = None) -> list[CaptionEvent]:
        """The events of a policy update (its committed and partial words; end_s: where the decoded
        audio ends). A commit is one final, or several where it holds a sentence end or outgrows a
        line (LineBreaker.split); language: the decode's."""
        events: list[CaptionEvent] = []
        if update.committed:
            if self.text_language is not None and language != self.text_language:
                self.text_since = update.committed[0].start
            self.text_language = language
        for words in self._lines.split(update.committed, self.text_language):
            text = "".join(w.text for w in words).strip()
            final = self._event("final", id=self.finals, start=words[0].start, end=words[-1].end, text=text, words=words,
                                alternatives=alternatives(words) if alternatives else (), language=self.text_language)
            lines = self._lines.add(final)  # a line this final does not fit ends before it
            events += self._line_events([ln for ln in lines if ln.last_id < final.id]) + [final]
            events += self._line_events([ln for ln in lines if ln.last_id == final.id])
            if self._on_final is not None:
                self._on_final(self.finals, words, self.text_language)
            self.finals += 1
        partial = "".join(w.text for w in update.partial).strip()
        if self._interim and partial != self._last_partial:
            p = update.partial  # an empty partial (cleared) is placed at the audio's end
            events.append(self._event("partial", start=p[0].start if p else end_s, end=p[-1].end if p else end_s,
                                      text=partial, words=p))
        self._last_partial = partial
        return events

    def idle(self, now_s: float) -> list[CaptionEvent]:
        """Nothing spoken or held back at now_s: the open line may end (LineBreaker.idle)."""
        return self._line_events(self._lines.idle(now_s))

    def flush(self) -> list[CaptionEvent]:
        """A pause became an end, or the stream ended: the open line ends."""
        return self._line_events(self._lines.flush())

    def _line_events(self, lines: list[CaptionLine]) -> list[CaptionEvent]:
        return [self._event("line", id=ln.last_id, start=ln.start, end=ln.end, text=ln.text, language=ln.language)
                for ln in lines]
