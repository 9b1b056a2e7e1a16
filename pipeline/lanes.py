"""Lanes: long-form decoding as programs that yield their decodes, so that many run at once.

A lane decodes a stretch of consecutive windows of one file in order, each window conditioned
on the lane's previous text (pipeline/longform.py ``lane_program``). It is a generator: it does
its own encoding and alignment, and ``yield``s a ``DecodeCall`` whenever it needs a decode,
receiving the WindowResult back. ``LaneRunner`` keeps up to ``width`` lanes in flight (lanes of
one file, of many files, or both) and feeds all their decodes to one ``DecodeLoop``, so that
the decodes of different lanes share the engine's passes. A lane that ends returns its value
to ``done``; a lane that raises is reported to ``failed`` and the others go on.

Lane layout never depends on ``width``: the same lanes give the same text whatever the width,
because the engine's passes are batch-invariant (models/invariant.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Generator, Hashable, Iterator

from specscribe.models.engines import DecodeLoop
from specscribe.models.types import DecodeRequest, EncodedAudio, WindowResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodeCall:
    """A decode a lane asks for. Attributes: encoded (the window), request."""

    encoded: EncodedAudio
    request: DecodeRequest


Lane = Generator[DecodeCall, WindowResult, Any]


class LaneRunner:
    """Runs lanes over one DecodeLoop, at most ``width`` of them with a decode in flight."""

    def __init__(self, loop: DecodeLoop, width: int, idle: Callable[[], Any] | None = None):
        """idle: work run after each step that finished a window (--adapt-draft's adapter.drain:
        bounded by the windows it was given), between windows, never inside a step."""
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.loop, self.width, self.idle = loop, width, idle
        self._active: dict[Hashable, Lane] = {}

    def run(
        self,
        lanes: Iterator[tuple[Hashable, Lane]],
        done: Callable[[Hashable, Any], None],
        failed: Callable[[Hashable, BaseException], None],
    ) -> None:
        """Pull lanes from ``lanes`` as room frees up, until every lane has ended.

        ``done(key, value)`` and ``failed(key, exc)`` may call ``cancel`` (say, for the other
        lanes of a file that failed). An exception from the loop itself (not from a lane) ends
        the run.
        """
        self._fill(lanes, done, failed)
        while self._active:
            finished = self.loop.step()
            for key, result in finished:
                lane = self._active.pop(key, None)
                if lane is not None:
                    self._advance(key, lane, result, done, failed)
            if finished and self.idle is not None:
                self._run_idle()
            self._fill(lanes, done, failed)

    def _run_idle(self) -> None:
        try:
            self.idle()
        except Exception:  # idle work (adaptation) only ever costs speed: a fault turns it off
            log.exception("idle work failed; it is off for the rest of this run")
            self.idle = None

    def cancel(self, key: Hashable) -> None:
        """Stop a lane: its decode in flight is dropped, its program closed."""
        lane = self._active.pop(key, None)
        if lane is not None:
            self.loop.cancel(key)
            lane.close()

    def _fill(self, lanes, done, failed) -> None:
        while len(self._active) < self.width:
            item = next(lanes, None)
            if item is None:
                return
            key, lane = item
            self._advance(key, lane, None, done, failed)

    def _advance(self, key, lane: Lane, result: WindowResult | Exception | None, done, failed) -> None:
        try:
            if isinstance(result, Exception):  # its decode failed (DecodeLoop.step): the lane fails below
                call = lane.throw(result)
            else:
                call = next(lane) if result is None else lane.send(result)
            self.loop.submit(key, call.encoded, call.request)
        except StopIteration as stop:
            done(key, stop.value)
            return
        except Exception as exc:  # this lane's failure only
            lane.close()
            failed(key, exc)
            return
        self._active[key] = lane


def idle_work(transcriber) -> Callable[[], Any] | None:
    """What a batch runs between windows: the engine's draft adapter (--adapt-draft), if any."""
    adapter = getattr(transcriber, "adapter", None)
    return adapter.drain if adapter is not None else None
