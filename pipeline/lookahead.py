"""Hearing audio ahead: a fork of a stream's VAD listens to audio that has arrived but waits in the
caller's queue while the session's model job runs (pipeline/session.py ``lookahead``).

The caller shows every chunk, in order, as it arrives, and inserts it into the session later. The
fork starts from the VAD's state plus the audio inserted but not yet heard, so it hears exactly what
the VAD will hear next; it is dropped once the VAD has caught up with it. It only starts while no
shown chunk is still outstanding (else it would miss that audio).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np


class Lookahead:
    """One stream's view ahead of its VAD. Not thread-safe: use it from the session's event loop."""

    def __init__(self, vad) -> None:
        self._vad = vad
        self._fork = None  # a fork of the VAD, ahead of it
        self._unseen = 0  # samples shown and not inserted yet

    def inserted(self, n: int) -> None:
        """n samples went into the session (shown first or not)."""
        self._unseen = max(0, self._unseen - n)

    def heard(self) -> None:
        """The VAD has heard more: drop the fork once it has heard all the fork heard."""
        if self._fork is not None and self._vad.offset >= self._fork.offset:
            self._fork = None

    def hears_end(self, x: np.ndarray, waiting: Iterable[np.ndarray], start: bool) -> bool:
        """Show x (float32, (n,)); waiting: inserted chunks the VAD has not heard yet. start: a fork may
        start now (a job is in flight). True if the fork hears a speech end (in x, or in waiting as it starts)."""
        outstanding, self._unseen = self._unseen, self._unseen + x.size
        events = []
        if self._fork is None:
            fork = getattr(self._vad, "fork", None)
            if not start or outstanding or fork is None:  # the fork would miss audio
                return False
            self._fork = fork()
            for chunk in waiting:
                events += self._fork.process(chunk)
        events += self._fork.process(x)
        return any(ev.kind == "end" for ev in events)
