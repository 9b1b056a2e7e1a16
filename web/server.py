"""The specscribe server: an ASGI app (Starlette) run by uvicorn with the `websockets` library.

    /v1/listen                  WebSocket streaming API (web/listen.py, docs/protocol.md)
    /v1/audio/transcriptions    OpenAI-compatible batch endpoint (web/http_api.py); also /translations
    /healthz                    readiness (503 while loading and draining: web/replica.py) and load
    /                           the live-caption page and its static files (web/static/)

Why ASGI rather than the plain `websockets` server: the OpenAI endpoint needs POST bodies, which
`websockets` cannot read. uvicorn's "websockets-sansio" protocol runs the same `websockets` library
(its non-deprecated Sans-I/O core) with write back-pressure.

One `ModelScheduler` owns the transcriber and is created inside the server's event loop once the model is
loaded; every connection builds its own session through it. Nothing per connection is stored on the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from specscribe.models.engines import Transcriber
from specscribe.pipeline.scheduler import ModelScheduler, SchedulerOptions
from specscribe.pipeline.types import StreamOptions
from specscribe.web import protocol as P
from specscribe.web.listen import Connection
from specscribe.web.listen_context import ClientSlots, ListenContext, SessionFactory
from specscribe.web.replica import Lifecycle, Phase, ReplicaServer, load_in_thread
from specscribe.web.security import LOOPBACK_SCOPE, SecurityOptions, is_loopback_host, key_ok, on_loopback, origin_ok

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
RAW_SEND = "specscribe.raw_send"  # scope key: the server's own send(), to reach its transport
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'; "
        b"script-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'",
    ),
]


@dataclass(frozen=True)
class ServerOptions:
    """Everything a server is configured with.

    Attributes:
        limits: WebSocket protocol limits (clients, frame size, session length, idle timeout).
        security: API key and allowed origins.
        stream_defaults: StreamOptions that each client's config is applied on.
        max_upload_bytes: largest file accepted by the REST endpoint.
        max_upload_seconds: longest audio a REST upload may decode to (413 beyond it; decoding stops there): the
            byte limit alone lets a low-bitrate file decode to tens of GB (float32, 16 kHz: ~230 MB an hour).
        max_rest_jobs: REST transcriptions run at once (more wait their turn).
        scheduler: the model scheduler's options (decode width, load policy).
        max_connections: open connections (HTTP and WebSocket together) before new requests get
            HTTP 503; bounds what idle or slow clients can hold (uvicorn's limit_concurrency).
        drain_timeout: seconds a SIGTERM'd server waits for open sessions to end before it finishes them
            (web/replica.py, docs/serving.md).
    """

    limits: P.Limits = field(default_factory=P.Limits)
    security: SecurityOptions = field(default_factory=SecurityOptions)
    stream_defaults: StreamOptions = field(default_factory=StreamOptions)
    max_upload_bytes: int = 200 * 1024 * 1024
    max_upload_seconds: float = 4 * 3600.0
    max_rest_jobs: int = 2
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)
    max_connections: int = 64
    drain_timeout: float = 20.0


def default_session_factory() -> SessionFactory:
    from specscribe.pipeline.session import StreamSession

    def make(scheduler: ModelScheduler, options: StreamOptions, session_id: str):
        return StreamSession(scheduler, options, session_id)

    return make


def create_app(
    transcriber: Transcriber | None,
    options: ServerOptions = ServerOptions(),
    make_session: SessionFactory | None = None,
    *,
    load: Callable[[], Transcriber] | None = None,
    on_ready: Callable[[], None] = lambda: None,
) -> Any:
    """The ASGI app, ready at once with a loaded `transcriber`, or (transcriber None) loading it with `load()`
    in a thread after start-up, so that /healthz answers "loading" meanwhile. `on_ready()` is called on the
    event loop when the app becomes ready. `make_session` defaults to pipeline.session.StreamSession (tests
    pass fakes). The app's `lifecycle` (web/replica.py) is what `serve` drains; a `load()` that raises is
    `lifecycle.failure`."""
    from specscribe.web.http_api import RestApi

    if (transcriber is None) == (load is None):
        raise ValueError("give create_app a transcriber or a load() callable, not both or neither")
    make_session = make_session or default_session_factory()
    slots = ClientSlots(options.limits.max_clients)
    lifecycle = Lifecycle()
    holder: dict[str, ListenContext] = {}

    def start(loaded: Transcriber) -> None:
        scheduler = ModelScheduler(loaded, options.scheduler)
        holder["ctx"] = ListenContext(
            scheduler=scheduler,
            make_session=make_session,
            limits=options.limits,
            stream_defaults=options.stream_defaults,
            model=public_model_name(loaded),
            engine=str(getattr(loaded, "name", "?")),
            slots=slots,
            languages=model_languages(loaded),
        )
        rest.transcriber, rest.scheduler = loaded, scheduler
        if lifecycle.set_ready():
            on_ready()

    async def load_then_start(loader: Callable[[], Transcriber]) -> None:
        try:
            loaded = await load_in_thread(loader)
        except Exception as exc:  # serve() re-raises it: `specscribe serve` exits with its one-line message
            lifecycle.fail(exc)
            return
        start(loaded)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loading = None
        if transcriber is not None:
            start(transcriber)
        else:
            loading = asyncio.create_task(load_then_start(load), name="model-load")  # the server answers meanwhile
        try:
            yield
        finally:
            if loading is not None:
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
            if "ctx" in holder:
                await holder["ctx"].scheduler.close()

    async def listen(ws: WebSocket) -> None:
        headers, query = ws.headers, ws.query_params
        if not origin_ok(options.security, headers.get("origin"), headers.get("host"), loopback=on_loopback(ws.scope)):
            log.info("rejected WebSocket from origin %r (Host %r)", headers.get("origin"), headers.get("host"))
            await _deny(ws, 403, "origin not allowed")
            return
        if not key_ok(options.security, headers, query):
            await _deny(ws, 401, "missing or wrong API key")
            return
        await ws.accept()
        ctx = holder.get("ctx")
        refusal = lifecycle.refusal()  # loading, draining
        if refusal is None and not ctx.scheduler.load.accepting:  # pipeline/load.py: degrade first, refuse last
            refusal = "overloaded"
        if refusal is None and not ctx.slots.try_acquire():
            refusal = "max_clients"
        if refusal is not None:
            await ws.send_text(P.dumps(P.busy_message(options.limits.max_clients, refusal)))
            await ws.close(code=P.CloseCode.TRY_AGAIN_LATER)
            return
        connection = Connection(ws, ctx, abort=lambda: _abort_transport(ws))
        try:
            with lifecycle.hold(connection.go_away):  # a drain waits for it, and at its timeout finishes it
                await connection.run()
        finally:
            ctx.slots.release()

    async def healthz(request) -> JSONResponse:
        """200 only when ready: a load balancer sends new sessions to this replica only then."""
        ctx = holder.get("ctx")
        code = 200 if lifecycle.phase is Phase.READY else 503
        if ctx is None:  # loading (or told to drain while loading)
            return JSONResponse({"status": lifecycle.phase.value}, status_code=code)
        return JSONResponse(
            {
                "status": lifecycle.phase.value,
                "model": ctx.model,
                "engine": ctx.engine,
                "sessions": slots.active,
                "max_clients": slots.limit,
                "model_jobs_done": ctx.scheduler.jobs_done,
                "load": ctx.scheduler.load.to_dict(),
                "model_sessions": ctx.scheduler.sessions_held,  # state the scheduler holds
            },
            status_code=code,
        )

    rest = RestApi(transcriber, options, lifecycle)
    middleware = []
    if options.security.allowed_origins:  # --allowed-origin also lets those pages call the REST API (CORS)
        from starlette.middleware import Middleware
        from starlette.middleware.cors import CORSMiddleware

        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(options.security.allowed_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-API-Key"],
            )
        )
    app = Starlette(
        routes=[
            WebSocketRoute("/v1/listen", listen),
            Route("/healthz", healthz, methods=["GET"]),
            *rest.routes(),
            Mount("/", app=StaticFiles(directory=STATIC_DIR, html=True), name="static"),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    return _Outer(app, lifecycle)


def public_model_name(transcriber: Transcriber) -> str:
    """The model's name as clients see it: `--model /srv/models/large-v3` is announced as `large-v3`,
    never as a server path (ready, /healthz, /v1/models)."""
    name = str(getattr(transcriber, "model_name", "?")).rstrip("/\\")
    return name.replace("\\", "/").rsplit("/", 1)[-1] or "?"


def model_languages(transcriber: Transcriber) -> frozenset[str] | None:
    """Language codes a Whisper model accepts: all of Whisper's for multilingual models, "en" for .en ones."""
    if not getattr(transcriber, "is_multilingual", True):
        return frozenset({"en"})
    try:
        from faster_whisper.tokenizer import _LANGUAGE_CODES
    except ImportError:  # faster-whisper moved it: accept any well-formed code
        return None
    return frozenset(_LANGUAGE_CODES)


class _Outer:
    """Outermost ASGI layer: keeps the server's raw send() in the scope and adds security headers.
    Carries the app's Lifecycle for the server that runs it (serve, BackgroundServer), which tells it the
    address it listens on (listening_on): whether it is loopback goes into every scope (web/security.py)."""

    def __init__(self, app, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.loopback: bool | None = None  # None: not told; security.on_loopback then asks the connection

    def listening_on(self, sock: socket.socket) -> None:
        self.loopback = is_loopback_host(str(sock.getsockname()[0]))

    async def __call__(self, scope, receive, send) -> None:
        if self.loopback is not None:
            scope[LOOPBACK_SCOPE] = self.loopback
        if scope["type"] == "websocket":
            scope[RAW_SEND] = send
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _deny(ws: WebSocket, status: int, text: str) -> None:
    """Refuse a WebSocket handshake with an HTTP status (403 via close when the server cannot)."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(PlainTextResponse(text, status_code=status))
    else:
        await ws.close(code=1008)


def _abort_transport(ws: WebSocket) -> None:
    """Cut a connection whose client stopped reading: uvicorn would otherwise wait forever for its
    write buffer to drain. Reaches the transport through the protocol object behind send()."""
    protocol = getattr(ws.scope.get(RAW_SEND), "__self__", None)
    transport = getattr(protocol, "transport", None)
    if transport is not None:
        transport.abort()
    else:
        log.warning("cannot abort the transport of a non-reading client; it is left to the OS")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one), so the URL is known before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app: Any, options: ServerOptions, log_level: str = "warning"):
    import uvicorn

    return uvicorn.Config(
        app,
        ws="websockets-sansio",
        ws_max_size=max(options.limits.max_frame_bytes, P.MAX_TEXT_FRAME),
        ws_per_message_deflate=False,  # audio does not compress; deflate costs CPU and memory per client
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        limit_concurrency=options.max_connections,
    )


async def serve(app: Any, sock: socket.socket, options: ServerOptions, log_level: str = "warning") -> None:
    """Serve app (create_app's) on an already bound socket until interrupted, or drained after a SIGTERM.
    Raises the model's load error when it failed to load."""
    app.listening_on(sock)
    server = ReplicaServer(uvicorn_config(app, options, log_level), app.lifecycle, options.drain_timeout)
    await server.serve(sockets=[sock])


class BackgroundServer:
    """Runs an app under uvicorn in a background thread on a free loopback port (tests, embedding).

    with BackgroundServer(app, options) as srv: srv.ws_url, srv.http_url; srv.drain() does what SIGTERM does
    """

    def __init__(self, app: Any, options: ServerOptions, host: str = "127.0.0.1") -> None:
        import threading

        self.sock = bind_socket(host, 0)
        self.port = self.sock.getsockname()[1]
        app.listening_on(self.sock)
        self.server = ReplicaServer(uvicorn_config(app, options), app.lifecycle, options.drain_timeout)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.http_url = f"http://{host}:{self.port}"
        self.ws_url = f"ws://{host}:{self.port}/v1/listen"

    def __enter__(self) -> "BackgroundServer":
        import time

        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:  # start-up handshake with the thread, bounded
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def drain(self) -> None:
        """Start draining, as the first SIGTERM does; the server thread ends when the drain is over."""
        self.server.request_drain()

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()
