"""What the /v1/listen connections of one server share: the scheduler, the session factory, limits, and the
live-session counter (web/listen.py serves each connection; web/server.py builds this once)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from specscribe.pipeline.scheduler import ModelScheduler
from specscribe.pipeline.types import CaptionEvent, StreamOptions
from specscribe.web import protocol as P


class CaptionSession(Protocol):
    """What a connection needs from pipeline.session.StreamSession."""

    def insert_audio(self, samples: np.ndarray) -> None: ...
    async def process(self) -> list[CaptionEvent]: ...
    async def finish(self) -> list[CaptionEvent]: ...
    def withdraw_update(self) -> bool: ...
    def lookahead(self, samples: np.ndarray) -> bool: ...


SessionFactory = Callable[[ModelScheduler, StreamOptions, str], CaptionSession]


class ClientSlots:
    """Counts live sessions against max_clients (the only connection-related state a server holds)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def try_acquire(self) -> bool:
        if self.active >= self.limit:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        self.active -= 1


@dataclass(frozen=True)
class ListenContext:
    """What every connection of one server shares (read-only, apart from the scheduler and slots).

    Attributes:
        scheduler: the one owner of the models.
        make_session: builds a connection's own session.
        limits: protocol limits.
        stream_defaults: StreamOptions the client's config is applied on.
        model: model name announced in `ready`.
        engine: engine name announced in `ready`.
        slots: live-session counter.
        languages: language codes the model accepts (None: not checked here).
    """

    scheduler: ModelScheduler
    make_session: SessionFactory
    limits: P.Limits
    stream_defaults: StreamOptions
    model: str
    engine: str
    slots: ClientSlots
    languages: frozenset[str] | None = None
