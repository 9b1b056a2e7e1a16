"""`specscribe serve`: the WebSocket API, the live-caption page and the OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from specscribe.commands.engine_args import (
    add_engine_args, add_streaming_args, check_engine_args, check_streaming_args, engine_options, non_finite,
    seconds_or_off,
)
from specscribe.machine import cpu_flags, flags_say_fast_bf16


# One live stream of base takes 0.2 of a core on a 2-core Xeon with AMX (bf16), 0.73 on a 2-core EPYC with AVX2
# only (float32), where 8 clients got their finals 12 s late and 16 a minute late, none lost (docs/benchmarks.md,
# "Many live clients on this machine"): there the default admits what it serves in time.
MAX_CLIENTS, MAX_CLIENTS_SLOW_CPU = 32, 4
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # present where an NVIDIA driver is loaded


def default_max_clients(device: str, flags: set[str] | None = None, nvidia: bool | None = None) -> int:
    """--max-clients when not given, for device as given (auto, cpu, cuda): MAX_CLIENTS on a GPU or a CPU with
    AVX512-BF16 or AMX (or one whose flags cannot be read), else MAX_CLIENTS_SLOW_CPU. With auto, an NVIDIA
    driver counts as a GPU: torch is not imported for this, so /healthz answers while the model loads."""
    flags = cpu_flags() if flags is None else flags
    if nvidia is None:
        nvidia = NVIDIA_DRIVER.exists()
    if device == "cuda" or (device == "auto" and nvidia) or not flags or flags_say_fast_bf16(flags):
        return MAX_CLIENTS
    return MAX_CLIENTS_SLOW_CPU


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the live-caption page, the WebSocket API and the OpenAI-compatible endpoint",
        description="Loads the model once and serves /v1/listen (WebSocket), / (browser page), /healthz and "
        "POST /v1/audio/transcriptions. Binds 127.0.0.1 unless told otherwise. /healthz is 503 until the model "
        "is loaded; SIGTERM drains (docs/serving.md).",
    )
    n = p.add_argument_group("network")
    n.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s; 0.0.0.0 for every interface)")
    n.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0 picks a free one)")
    n.add_argument("--api-key", default=None, help="require this key (default: $SPECSCRIBE_API_KEY; none = open)")
    n.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="a browser origin allowed to connect, e.g. https://app.example (repeatable; '*' = any; "
                   "default: the server's own page only)")
    lim = p.add_argument_group("limits")
    lim.add_argument("--max-clients", type=int, default=None,
                     help="concurrent streaming sessions at most; below it, new sessions are refused only when the model is "
                          f"at its limit (docs/protocol.md, Load) (default: {MAX_CLIENTS}; {MAX_CLIENTS_SLOW_CPU} on a CPU "
                          "without AVX512-BF16 or AMX and no GPU, where one stream takes most of a core)")
    lim.add_argument("--max-frame-bytes", type=int, default=1 << 20, help="largest WebSocket frame (default: %(default)s)")
    lim.add_argument("--max-session-seconds", type=float, default=3600.0, help="longest session (default: %(default)s)")
    lim.add_argument("--idle-timeout", type=float, default=30.0, help="seconds without a client frame (default: %(default)s)")
    lim.add_argument("--max-backlog-seconds", type=float, default=60.0,
                     help="unprocessed audio a stream may have before it is closed as overloaded (default: %(default)s)")
    lim.add_argument("--max-connections", type=int, default=None,
                     help="open HTTP + WebSocket connections; beyond it requests get 503 (default: 64, or twice "
                     "--max-clients if that is more)")
    lim.add_argument("--max-upload-mb", type=float, default=200.0, help="largest file for the REST endpoint (default: %(default)s)")
    lim.add_argument("--max-upload-hours", type=float, default=4.0,
                     help="longest audio a REST upload may decode to; decoding stops there, 413 (default: %(default)s)")
    lim.add_argument("--drain-timeout", type=float, default=20.0,
                     help="after SIGTERM, seconds open sessions may run on before the server finishes them (finals "
                     "sent, close 1001) and exits; fits Kubernetes' default 30 s grace period (default: %(default)s)")
    add_engine_args(p)
    p.add_argument("--decode-width", type=int, default=16,
                   help="decodes of all sessions that share one target pass at most; 1 decodes them one by one (default: %(default)s)")
    s = p.add_argument_group("streaming")
    add_streaming_args(s)
    s.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                   help="the server's and specscribe's own log; debug adds a line per decode of every session "
                   "(its window, words and commits) (default: %(default)s)")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"specscribe serve: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from specscribe.models.engines import load_transcriber
    from specscribe.pipeline.scheduler import SchedulerOptions
    from specscribe.pipeline.types import StreamOptions
    from specscribe.web import protocol as P
    from specscribe.web.security import API_KEY_ENV, SecurityOptions, is_loopback_host
    from specscribe.web.server import ServerOptions, bind_socket, create_app, serve

    if not 0 <= args.port <= 65535:
        return _fail("--port must be 0 ... 65535")
    if not getattr(args, "verbose", False):  # -v: everything at DEBUG already
        logging.getLogger("specscribe").setLevel(args.log_level.upper())
    defaulted = args.max_clients is None
    if defaulted:
        args.max_clients = default_max_clients(args.model_device)
    if args.max_connections is None:
        args.max_connections = max(64, 2 * args.max_clients)
    if (problem := non_finite(args, ("max_session_seconds", "idle_timeout", "max_backlog_seconds", "max_upload_mb",
                                     "max_upload_hours", "drain_timeout"))) is not None:
        return _fail(problem)
    for name in ("max_clients", "max_connections", "max_frame_bytes", "max_session_seconds", "idle_timeout", "max_upload_mb",
                 "max_upload_hours", "max_backlog_seconds", "decode_width"):
        if getattr(args, name) <= 0:
            return _fail(f"--{name.replace('_', '-')} must be positive")
    if args.drain_timeout < 0:
        return _fail("--drain-timeout must be 0 or more")
    if (problem := check_engine_args(args) or check_streaming_args(args)) is not None:
        return _fail(problem)
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if not is_loopback_host(args.host) and not api_key:
        print(f"specscribe serve: warning: listening on {args.host} without an API key; anyone who can reach "
              f"this port can use the server (set --api-key or ${API_KEY_ENV})", file=sys.stderr)
    options = ServerOptions(
        limits=P.Limits(max_clients=args.max_clients, max_frame_bytes=args.max_frame_bytes,
                        max_session_seconds=args.max_session_seconds, idle_timeout=args.idle_timeout,
                        max_backlog_seconds=args.max_backlog_seconds),
        security=SecurityOptions(api_key=api_key, allowed_origins=tuple(args.allowed_origin)),
        stream_defaults=replace(StreamOptions(), update_interval=args.update_interval, agree_gap=args.agree_gap,
                                settle_after=seconds_or_off(args.settle_after), encoder_pad=args.encoder_pad,
                                loaded_encoder_pad=seconds_or_off(args.loaded_encoder_pad),
                                pause_commit=seconds_or_off(args.pause_commit)),
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
        max_upload_seconds=args.max_upload_hours * 3600.0,
        scheduler=SchedulerOptions(width=args.decode_width),
        max_connections=args.max_connections,
        drain_timeout=args.drain_timeout,
    )
    engine = engine_options(args)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc})")
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    print(f"loading {args.engine} engine, model {args.model} ... ({base}/healthz answers 503 until it is loaded)",
          file=sys.stderr, flush=True)
    if defaulted and args.max_clients < MAX_CLIENTS:  # after the line above, which scripts read first
        print(f"specscribe serve: the model runs on a CPU without AVX512-BF16 or AMX: at most {args.max_clients} "
              "live sessions at once, the number it serves in time (--max-clients N to change)", file=sys.stderr)

    def announce() -> None:  # on stdout once ready, as before the server answered while loading: scripts wait for it
        print(f"specscribe: serving {base}/  (WebSocket ws://{shown}:{port}/v1/listen, "
              f"OpenAI-compatible POST {base}/v1/audio/transcriptions)", flush=True)

    # Loaded by the app after start-up, in a thread: /healthz answers 503 "loading" meanwhile. A load error
    # (ModelError) comes out of serve() and is the command's one error line (specscribe/cli.py).
    app = create_app(None, options, load=lambda: load_transcriber(engine), on_ready=announce)
    import asyncio

    try:
        asyncio.run(serve(app, sock, options, args.log_level))
    except KeyboardInterrupt:
        pass
    return 0
