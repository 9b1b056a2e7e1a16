"""One /v1/listen connection: config handshake, then three tasks that share nothing with other connections.

    reader ──(16 kHz float32 chunks, controls; bounded inbox)──► processor ──(messages; bounded outbox)──► writer
    (receive, validate, resample,                                 (session.insert_audio / process /       (send JSON to
     idle + session limits)                                        finish, one model job at a time)         the client)

The reader never waits on the model: it only validates and resamples. The processor awaits the inbox
(no polling) and does the model work through the shared ModelScheduler. The outbox is bounded: a client
that does not read its events fills it and is dropped (close 4010) without slowing anyone else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from specscribe.pipeline.resample import Resampler
from specscribe.web import protocol as P
from specscribe.web.listen_context import CaptionSession, ListenContext
from specscribe.web.timeline import Timeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Stop:
    """Inbox item: flush, optionally send an error, then close with code (the reader queued the resampler's tail first)."""

    code: int
    error: dict[str, Any] | None = None
    reason: str = "close"


_FINALIZE = "finalize"


class Connection:
    """The state of one WebSocket connection; created per connection, never shared.

    ws: a starlette WebSocket (accept, receive, send_text, close) already accepted by the caller.
    """

    def __init__(self, ws: Any, ctx: ListenContext, abort: Callable[[], None] = lambda: None) -> None:
        self.ws = ws
        self.ctx = ctx
        self.limits = ctx.limits
        self._abort = abort
        self.session_id = uuid.uuid4().hex[:16]
        # Unbounded in items, bounded in seconds (max_backlog_seconds): the reader must never block,
        # or the server stops reading the socket (pongs included) and the keepalive kills the connection.
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._backlog = 0.0  # seconds of 16 kHz audio in the inbox
        self._outbox: asyncio.Queue = asyncio.Queue(maxsize=self.limits.max_outgoing)
        self._done = asyncio.Event()
        # after `close` or go_away(): keep reading (pongs, disconnects) but ignore data while finals flush
        self._closing = False
        self._slow = False
        self._t0 = time.monotonic()
        self.audio_seconds = 0.0  # client audio received, seconds
        self._timeline = Timeline()  # one timeline over the sessions, which restart after each finalize
        self._resampler: Resampler | None = None  # the reader's; None until the config is known
        self._going = asyncio.Event()  # go_away() was called: a connection still without its config closes at once

    # ---- entry point ----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection to its end. Returns after the socket is closed or dropped."""
        config = await self._handshake()
        if config is None:
            return
        self.config = config
        self._options = dataclasses.replace(
            self.ctx.stream_defaults,
            language=config.language,
            languages=config.languages,
            task=config.task,
            translate=config.translate,
            interim_results=config.interim_results,
            beam_size=max(config.beam_size, config.alternatives),
            n_best=max(1, config.alternatives),
            hotwords=config.hotwords,
        )
        try:
            self._session: CaptionSession | None = self.ctx.make_session(self.ctx.scheduler, self._options, self.session_id)
            self._resampler = Resampler(config.sample_rate, config.channels)
        except Exception:
            log.exception("session %s: cannot start a session", self.session_id)
            await self._fail(P.ErrorCode.INTERNAL, "internal server error: cannot start a session", P.CloseCode.INTERNAL_ERROR)
            return
        await self._send_now(P.ready_message(self.session_id, self.ctx.model, self.ctx.engine, config, self.limits))
        tasks = [
            asyncio.create_task(self._guard(self._read_loop()), name=f"read-{self.session_id}"),
            asyncio.create_task(self._guard(self._process_loop()), name=f"process-{self.session_id}"),
            asyncio.create_task(self._guard(self._write_loop()), name=f"write-{self.session_id}"),
        ]
        try:
            await self._done.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.ctx.scheduler.forget(self.session_id)
            self._session = None
            if self._slow:
                await self._drop_slow_client()

    async def _handshake(self) -> P.ClientConfig | None:
        """Wait for the config frame; on a bad one send a fatal error and close. Returns None then, and when the
        server drains first (go_away: there is nothing to flush, so it closes with 1001 at once)."""
        receive = asyncio.ensure_future(_receive(self.ws, self.limits.idle_timeout))
        going = asyncio.ensure_future(self._going.wait())
        try:
            await asyncio.wait({receive, going}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            going.cancel()
            drained = not receive.done()
            if drained:
                receive.cancel()
        if drained:
            await asyncio.gather(receive, return_exceptions=True)
            await self.ws.close(code=P.CloseCode.GOING_AWAY)
            return None
        try:
            message = receive.result()
        except asyncio.TimeoutError:
            await self._fail(P.ErrorCode.IDLE_TIMEOUT, "no config message within the idle timeout", P.CloseCode.IDLE_TIMEOUT)
            return None
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("text") is None:
            await self._fail(P.ErrorCode.PROTOCOL, "the first message must be a JSON config text frame, not audio", P.CloseCode.PROTOCOL_ERROR)
            return None
        try:
            config = P.parse_text(message["text"], expect_config=True, languages=self.ctx.languages)
        except P.ProtocolError as exc:
            code = {P.ErrorCode.INVALID_CONFIG: P.CloseCode.INVALID_CONFIG,
                    P.ErrorCode.FRAME_TOO_BIG: P.CloseCode.MESSAGE_TOO_BIG}.get(exc.code, P.CloseCode.PROTOCOL_ERROR)
            await self._fail(exc.code, exc.message, code)
            return None
        assert isinstance(config, P.ClientConfig)
        return config

    # ---- reader ---------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        deadline = self._t0 + self.limits.max_session_seconds
        while True:
            timeout = None if self._closing else min(self.limits.idle_timeout, deadline - time.monotonic())
            try:
                message = await _receive(self.ws, None if timeout is None else max(timeout, 0.0))
            except asyncio.TimeoutError:
                if time.monotonic() >= deadline:
                    await self._stop_session_limit()
                else:
                    msg = P.error_message(P.ErrorCode.IDLE_TIMEOUT, f"no frame for {self.limits.idle_timeout:g} s", fatal=True)
                    self._stop(_Stop(P.CloseCode.IDLE_TIMEOUT, msg, reason="idle_timeout"))
                return
            if message["type"] == "websocket.disconnect":
                log.info("session %s: client disconnected (code %s)", self.session_id, message.get("code"))
                self._done.set()
                return
            data, text = message.get("bytes"), message.get("text")
            if self._closing:
                continue
            if data is not None:
                if not await self._on_audio(data):
                    return
            elif text is not None:
                if not await self._on_text(text):
                    self._closing = True

    async def _on_audio(self, data: bytes) -> bool:
        """Validate, resample and queue one audio frame. False when the session must stop."""
        if len(data) > self.limits.max_frame_bytes:
            msg = P.error_message(P.ErrorCode.FRAME_TOO_BIG, f"frame of {len(data)} bytes is over the limit of {self.limits.max_frame_bytes}", fatal=True)
            self._stop(_Stop(P.CloseCode.MESSAGE_TOO_BIG, msg, reason="error"))
            return False
        try:
            samples = P.decode_audio(data, self.config)
        except P.ProtocolError as exc:
            self._emit(P.error_message(exc.code, exc.message, fatal=False))
            return True
        self.audio_seconds += self.config.seconds(len(data))
        self._queue(self._resampler.process(samples))
        if self._backlog + self._session_pending() > self.limits.max_backlog_seconds:  # the model cannot keep up
            log.warning("session %s: %.1f s of audio waiting; the server is overloaded", self.session_id, self._backlog)
            self._emit(P.error_message(P.ErrorCode.OVERLOADED, f"the server is {self._backlog:.0f} s behind this stream "
                                       "and cannot keep up; try again later", fatal=True))
            self._emit(("close", P.CloseCode.TRY_AGAIN_LATER))
            return False
        if self.audio_seconds >= self.limits.max_session_seconds:
            await self._stop_session_limit()
            return False
        return True

    def _queue(self, chunk: np.ndarray) -> None:
        if not chunk.size:
            return
        self._backlog += chunk.size / 16_000
        self._inbox.put_nowait(chunk)
        if self._session is not None:
            # the session's VAD hears it ahead: audio that ends the utterance recalls the update in flight
            # (around a finalize a chunk shown to this session may be inserted into the next one, whose fork
            # then misses it: at worst one recall is missed, or one update recalled needlessly)
            self._session.lookahead(chunk)
            if self._backlog >= self._options.min_silence:
                # enough audio waits behind the session's model job to hold the utterance's end: an update
                # still queued is stale, and the final must not wait behind it (pipeline/scheduler.py)
                self._session.withdraw_update()

    def _queue_tail(self) -> None:
        """soxr holds back the last samples it was given (1060 at 8 kHz): the end of the last word. Every flush
        (finalize, and each stop that flushes finals) queues them first."""
        if self._resampler is not None:
            self._queue(self._resampler.flush())

    def _stop(self, stop: _Stop) -> None:
        self._queue_tail()
        self._inbox.put_nowait(stop)

    def _session_pending(self) -> float:
        session = self._session
        return float(getattr(session, "pending_seconds", 0.0)) if session is not None else 0.0

    async def _on_text(self, text: str) -> bool:
        try:
            control = P.parse_text(text, expect_config=False)
        except P.ProtocolError as exc:
            self._emit(P.error_message(exc.code, exc.message, fatal=False))
            return True
        assert isinstance(control, P.Control)
        if control.type == "finalize":
            self._queue_tail()
            self._inbox.put_nowait(_FINALIZE)
            # a fresh filter for the next session: the flushed one cannot go on, and its held samples went above
            self._resampler = Resampler(self.config.sample_rate, self.config.channels)
        elif control.type == "close":
            self._stop(_Stop(P.CloseCode.NORMAL, None, reason="close"))
            return False
        return True  # keepalive: receiving it reset the idle timer

    def go_away(self) -> None:
        """Finish the session as a client `close` does (every final, then `stats` with reason "draining"), but
        close with 1001: the server is draining (web/replica.py) and the client should reconnect elsewhere."""
        self._closing = True
        self._going.set()
        self._stop(_Stop(P.CloseCode.GOING_AWAY, None, reason="draining"))

    async def _stop_session_limit(self) -> None:
        msg = P.error_message(P.ErrorCode.SESSION_LIMIT, f"session reached the limit of {self.limits.max_session_seconds:g} s", fatal=True)
        self._stop(_Stop(P.CloseCode.SESSION_LIMIT, msg, reason="session_limit"))

    # ---- processor ------------------------------------------------------------------------

    async def _process_loop(self) -> None:
        while True:
            items = [await self._inbox.get()]
            while not self._inbox.empty():
                items.append(self._inbox.get_nowait())
            fresh = False
            for item in items:
                if isinstance(item, np.ndarray):
                    self._backlog -= item.size / 16_000
                    self._insert(item)
                    fresh = True
                elif item is _FINALIZE:
                    await self._flush("finalize", restart=True)
                    fresh = False
                elif isinstance(item, _Stop):
                    await self._flush(item.reason, restart=False)
                    if item.error is not None:
                        self._emit(item.error)
                    self._emit(("close", item.code))
                    return
            if fresh:
                for event in await self._session.process():
                    self._emit(self._timeline.event_dict(event))

    def _insert(self, chunk: np.ndarray) -> None:
        self._session.insert_audio(chunk)
        self._timeline.inserted(chunk.size / 16_000)

    async def _flush(self, reason: str, *, restart: bool) -> None:
        """finish() the session: its last finals, translations, then one stats message marked with reason."""
        events = await self._session.finish()
        stats: dict[str, Any] = {}
        for event in events:
            if event.type == "stats":
                stats.update(event.stats or {})
                continue
            self._emit(self._timeline.event_dict(event))
        stats.update({"audio_seconds": round(self.audio_seconds, 3), "finals": self._timeline.finals, "session_seconds": round(time.monotonic() - self._t0, 3),
                      "load": self.ctx.scheduler.load.to_dict()})
        self._emit({"type": "stats", "emitted_at": round(time.monotonic() - self._t0, 3), "reason": reason, "stats": stats})
        if restart:  # the next utterances continue the same timeline and final numbering
            self._timeline.restart(time.monotonic() - self._t0)
            self._session = self.ctx.make_session(self.ctx.scheduler, self._options, self.session_id)

    # ---- writer ---------------------------------------------------------------------------

    def _emit(self, message: Any) -> None:
        """Queue a message for the client; a full outbox means the client does not read: drop it."""
        try:
            self._outbox.put_nowait(message)
        except asyncio.QueueFull:
            if not self._slow:
                log.warning("session %s: client does not read its events (%d queued); dropping it", self.session_id, self._outbox.qsize())
            self._slow = True
            self._done.set()

    async def _write_loop(self) -> None:
        while True:
            message = await self._outbox.get()
            if isinstance(message, tuple):
                await self.ws.close(code=message[1])
                self._done.set()
                return
            text = P.dumps(message)  # outside the try: a fault here is the server's (the guard's), not a disconnect
            try:
                await self.ws.send_text(text)
            except Exception:  # the client went away while we wrote
                self._done.set()
                return

    async def _send_now(self, message: dict[str, Any]) -> None:
        await self.ws.send_text(P.dumps(message))

    async def _fail(self, code: str, message: str, close_code: int) -> None:
        """Fatal error before the tasks run: one error message, then close."""
        try:
            await asyncio.wait_for(self._send_now(P.error_message(code, message, fatal=True)), 5.0)
            await asyncio.wait_for(self.ws.close(code=close_code), 5.0)
        except Exception:
            self._abort()

    async def _drop_slow_client(self) -> None:
        try:
            await asyncio.wait_for(self.ws.close(code=P.CloseCode.SLOW_CLIENT), 1.0)
        except Exception:
            pass
        self._abort()  # its write buffer would never drain: cut the TCP connection

    async def _guard(self, coro) -> None:
        """Run one of the three tasks; an unexpected fault is logged here and the client gets a bare error."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s: internal error", self.session_id)
            if asyncio.current_task().get_name().startswith("write-"):  # no writer left to send them: send them here
                await self._fail(P.ErrorCode.INTERNAL, "internal server error; the session ends", P.CloseCode.INTERNAL_ERROR)
                self._done.set()
                return
            self._emit(P.error_message(P.ErrorCode.INTERNAL, "internal server error; the session ends", fatal=True))
            self._emit(("close", P.CloseCode.INTERNAL_ERROR))


async def _receive(ws: Any, timeout: float | None) -> dict[str, Any]:
    """ws.receive() with a timeout. asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
    cancellation that races with a message, which would leave a cancelled reader running."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            return await ws.receive()
    return await asyncio.wait_for(ws.receive(), timeout)  # Python 3.10
