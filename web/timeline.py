"""One /v1/listen connection's timeline across the sessions it runs: a `finalize` control ends a
session and starts the next, and the client still sees one stream, its event times counting from
the connection's start and its final, line and translation ids continuing where they stopped."""

from __future__ import annotations

from typing import Any

from specscribe.pipeline.types import CaptionEvent

NUMBERED = ("final", "translation", "line")  # event types whose `id` counts across sessions


class Timeline:
    """Attributes: finals (`final` events sent on this connection)."""

    def __init__(self) -> None:
        self._time_offset = 0.0  # seconds of audio in the sessions before the current one
        self._id_offset = 0
        self._emitted_offset = 0.0  # the current session's start, on the connection's clock
        self._next_id = 0
        self._session_audio = 0.0  # 16 kHz seconds inserted into the current session
        self.finals = 0

    def inserted(self, seconds: float) -> None:
        """Audio went into the current session."""
        self._session_audio += seconds

    def restart(self, now: float) -> None:
        """A new session starts at `now` (seconds since the connection started) where the last one ended."""
        self._time_offset += self._session_audio
        self._session_audio = 0.0
        self._id_offset = self._next_id
        self._emitted_offset = now

    def event_dict(self, event: CaptionEvent) -> dict[str, Any]:
        """The event as the client sees it: times and ids on the connection's timeline."""
        d = event.to_dict()
        d["emitted_at"] = round(d["emitted_at"] + self._emitted_offset, 3)
        for key in ("start", "end"):
            if key in d:
                d[key] = round(d[key] + self._time_offset, 3)
        for word in d.get("words", ()):
            word["start"] = round(word["start"] + self._time_offset, 3)
            word["end"] = round(word["end"] + self._time_offset, 3)
        if "id" in d and d["type"] in NUMBERED:
            d["id"] += self._id_offset
            if d["type"] == "final":
                self._next_id = max(self._next_id, d["id"] + 1)
                self.finals += 1
        return d
