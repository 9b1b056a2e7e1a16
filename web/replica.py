"""One serving replica's lifecycle: loading -> ready -> draining, and the uvicorn server that drains on SIGTERM.

Behind a load balancer a replica must say when it can take work and must leave without losing any:

    loading   the socket is open and /healthz answers 503 {"status": "loading"} while the model loads in a
              thread; new WebSocket sessions get `busy` (reason "loading"), REST calls 503
    ready     /healthz 200 {"status": "ok", ...}
    draining  after the first SIGTERM: /healthz 503 {"status": "draining", ...}, new sessions `busy` (reason
              "draining"), new REST calls 503; open sessions and REST calls run on until they end, or until
              the drain timeout, when each open session is finished as a client `close` would finish it
              (every final, then `stats`) and closed with 1001 so that its client reconnects elsewhere

The replica then exits 0. A second signal, or Ctrl-C at any time, is uvicorn's own shutdown, at once.
docs/serving.md explains how a load balancer and Kubernetes use this.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import signal
import threading
from typing import Any, Callable, Iterator, TypeVar

import uvicorn

log = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds that sessions still open at the drain timeout get to send their last finals: finishing decodes the
# audio not yet committed (at most one window); a client that does not read is dropped sooner (close 4010).
FLUSH_GRACE_S = 5.0


class Phase(str, enum.Enum):
    """Where a replica is; the value is /healthz's `status`."""

    LOADING = "loading"
    READY = "ok"
    DRAINING = "draining"


class Lifecycle:
    """A replica's phase and the work open in it (WebSocket sessions, REST calls), for admission and drain.

    Used on the server's event loop only.
    """

    def __init__(self) -> None:
        self.phase = Phase.LOADING
        self.failure: BaseException | None = None  # why the model did not load
        self.failed = asyncio.Event()  # set with failure: the server exits and re-raises it
        self._open: dict[object, Callable[[], None]] = {}  # one entry per open piece of work: its finisher
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def open_work(self) -> int:
        return len(self._open)

    def refusal(self) -> str | None:
        """Why new work is refused now ("loading" or "draining"), or None when it is admitted."""
        return None if self.phase is Phase.READY else self.phase.value

    def set_ready(self) -> bool:
        """The model is loaded: True when the replica is ready now (one told to drain while it loaded stays draining)."""
        if self.phase is Phase.LOADING:
            self.phase = Phase.READY
        return self.phase is Phase.READY

    def fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.failed.set()

    @contextlib.contextmanager
    def hold(self, finish: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Count one piece of work as open while the block runs; a drain waits for it. `finish` asks it to end
        cleanly at the drain timeout (a session: flush and close 1001); REST calls have none."""
        token = object()
        self._open[token] = finish
        self._idle.clear()
        try:
            yield
        finally:
            del self._open[token]
            if not self._open:
                self._idle.set()

    def begin_drain(self) -> None:
        """Refuse new work from now on (/healthz 503 "draining")."""
        self.phase = Phase.DRAINING

    async def drain(self, timeout: float, grace: float = FLUSH_GRACE_S) -> None:
        """Drain: wait until no work is open, at most `timeout` s; then finish what is still open and wait
        for it at most `grace` s more. What is open after that is cut by the server's shutdown."""
        self.begin_drain()
        if await _wait(self._idle, timeout):
            return
        log.warning("drain timeout (%g s): finishing %d open session(s) and request(s)", timeout, self.open_work)
        for finish in list(self._open.values()):
            finish()
        if not await _wait(self._idle, grace):
            log.warning("%d session(s) or request(s) still open %g s after the drain timeout; cutting them",
                        self.open_work, grace)


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait for event at most timeout seconds; True when it was set (a timeout of 0 still sees a set event)."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True


async def load_in_thread(load: Callable[[], T]) -> T:
    """load() in a daemon thread, awaited. Not asyncio.to_thread: its executor threads are joined when the
    loop and the interpreter end, so Ctrl-C or SIGTERM during a model load would wait for the load to end."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def deliver(setter: Callable[[Any], None], value: Any) -> None:
        def settle() -> None:
            if not future.done():  # not cancelled meanwhile (the server stopped during the load)
                setter(value)

        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for the model any more
            loop.call_soon_threadsafe(settle)

    def work() -> None:
        try:
            result = load()
        except BaseException as exc:  # delivered to the awaiting task, which decides
            deliver(future.set_exception, exc)
        else:
            deliver(future.set_result, result)

    threading.Thread(target=work, name="model-load", daemon=True).start()
    return await future


class ReplicaServer(uvicorn.Server):
    """uvicorn's Server, with a replica's SIGTERM: drain (Lifecycle.drain), then exit 0.

    uvicorn's own SIGTERM handling stops accepting, gives connections `timeout_graceful_shutdown` seconds and
    then cuts open WebSockets (1012) with their last finals unsent; so the first SIGTERM is taken here
    instead. SIGINT keeps uvicorn's handling (that shutdown; a second Ctrl-C forces it), and any signal during
    a drain forces the exit. A model that fails to load stops the server, and serve() raises its error.
    """

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle, drain_timeout: float) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self.drain_timeout = drain_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_requested = False
        self._drain_task: asyncio.Task | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        watch = asyncio.create_task(self._exit_on_load_failure(), name="load-failure")
        try:
            await super().serve(sockets=sockets)
        finally:
            watch.cancel()
        if self.lifecycle.failure is not None:
            raise self.lifecycle.failure

    async def _exit_on_load_failure(self) -> None:
        await self.lifecycle.failed.wait()
        self.should_exit = True

    def request_drain(self) -> None:
        """Start the drain once; safe from a signal handler or another thread (once serve() runs)."""
        if self._drain_requested:
            return
        assert self._loop is not None, "request_drain() before serve()"
        self._drain_requested = True
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.lifecycle.begin_drain()  # at once: the next /healthz already says so
        self._drain_task = asyncio.create_task(self._drain(), name="drain")

    async def _drain(self) -> None:
        await self.lifecycle.drain(self.drain_timeout)
        self.should_exit = True  # uvicorn's shutdown: close the listener and the idle HTTP connections

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGTERM and not self._drain_requested and not self.should_exit:
            self.request_drain()  # not recorded in _captured_signals: uvicorn would re-raise it at exit (rc 143)
            return
        if self._drain_requested:
            self.force_exit = True  # a second signal: stop waiting for the open sessions
        super().handle_exit(sig, frame)
