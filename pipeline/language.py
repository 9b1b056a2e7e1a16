"""Which language a stream speaks: evidence over several seconds, a lock, and a re-check per utterance.

Whisper's language identification is unreliable on the first second or two of speech (Harvard
sentences over a codec came out Welsh when the language was fixed after a 2 s decode). So a stream
collects evidence: every decode whose language is not settled runs the detector on its audio and
hands the tracker the probabilities and the seconds of speech they rest on. An utterance's latest
detection supersedes its earlier ones (the buffer grows: later windows hold the earlier audio);
finished utterances count with their speech seconds as weight.

- Before the lock, each decode uses the most likely language so far. The lock comes once there is
  ``lock_seconds`` of speech and the weighted probability of the best language reaches
  ``lock_probability``.
- After the lock, each new utterance (after a pause) is checked again on its first
  ``switch_seconds``: a different language that this utterance alone gives ``switch_probability``
  or more takes over (hysteresis: one doubtful utterance does not flip a stream). While it is being
  checked, a decode already uses the language the utterance is sure of (``decode_language``).
- ``allowed`` restricts every choice to the listed codes (probabilities renormalized among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class LanguageOptions:
    """Attributes: allowed (codes to choose among; empty: any), lock_seconds, lock_probability,
    switch_seconds, switch_probability (see the module docstring)."""

    allowed: tuple[str, ...] = ()
    lock_seconds: float = 4.0
    lock_probability: float = 0.8
    switch_seconds: float = 2.0
    switch_probability: float = 0.9


@dataclass(frozen=True)
class LanguageState:
    """What the tracker says now. Attributes: language (None: no evidence yet), probability, locked."""

    language: str | None = None
    probability: float = 0.0
    locked: bool = False


def restrict(probs: Mapping[str, float], allowed: tuple[str, ...]) -> dict[str, float]:
    """probs among the allowed codes, renormalized (all of them when allowed is empty)."""
    kept = {k: v for k, v in probs.items() if not allowed or k in allowed}
    total = sum(kept.values())
    if total <= 0:  # the detector gave none of them anything: equal odds
        return {k: 1.0 / len(allowed) for k in allowed} if allowed else {}
    return {k: v / total for k, v in kept.items()}


@dataclass
class LanguageTracker:
    """The language evidence of one stream. Not thread-safe (one session's event loop)."""

    options: LanguageOptions = field(default_factory=LanguageOptions)
    state: LanguageState = field(default_factory=LanguageState)
    _history: dict[str, float] = field(default_factory=dict)  # sum of seconds x probability, finished utterances
    _history_s: float = 0.0
    _utterance: dict[str, float] = field(default_factory=dict)  # this utterance's latest detection
    _utterance_s: float = 0.0

    @property
    def decode_language(self) -> str | None:
        """The language of the next decode: the stream's, unless this utterance is already sure of another
        (the switch itself waits for switch_seconds, but the words of the utterance are decoded in it)."""
        if self.state.locked and self._utterance:
            code, p = self._best(self._utterance)
            if code != self.state.language and p >= self.options.switch_probability:
                return code
        return self.state.language

    @property
    def needs_detection(self) -> bool:
        """Whether the next decode should run the detector: before the lock, and on an utterance's first seconds."""
        return not self.state.locked or self._utterance_s < self.options.switch_seconds

    def observe(self, probs: Mapping[str, float], seconds: float) -> LanguageState:
        """A detection over ``seconds`` of this utterance's speech (the decode's window). Returns the new state."""
        self._utterance, self._utterance_s = restrict(probs, self.options.allowed), max(seconds, 0.0)
        o = self.options
        if not self.state.locked:
            language, p = self._best(self._combined())
            locked = self._history_s + self._utterance_s >= o.lock_seconds and p >= o.lock_probability
            self.state = LanguageState(language, p, locked)
        elif self._utterance:
            language, p = self._best(self._utterance)
            if language != self.state.language and p >= o.switch_probability and self._utterance_s >= o.switch_seconds:
                self.state = LanguageState(language, p, True)
                self._history, self._history_s = {}, 0.0  # the old language's evidence no longer counts
        return self.state

    def new_utterance(self) -> None:
        """After a pause: the utterance's evidence joins the history, and the next one is checked afresh."""
        if self._utterance_s > 0:
            for code, p in self._utterance.items():
                self._history[code] = self._history.get(code, 0.0) + p * self._utterance_s
            self._history_s += self._utterance_s
        self._utterance, self._utterance_s = {}, 0.0

    def _combined(self) -> dict[str, float]:
        total = self._history_s + self._utterance_s
        if total <= 0:
            return dict(self._utterance)
        codes = set(self._history) | set(self._utterance)
        return {c: (self._history.get(c, 0.0) + self._utterance.get(c, 0.0) * self._utterance_s) / total for c in codes}

    @staticmethod
    def _best(probs: Mapping[str, float]) -> tuple[str | None, float]:
        if not probs:
            return None, 0.0
        code = max(probs, key=lambda c: (probs[c], c))
        return code, probs[code]
