"""`specscribe stream FILE --url ws://...`: send a file to a specscribe server at real-time pace, print events.

Ctrl-C stops sending and asks the server to close: the finals of the audio sent so far still come, then exit 0."""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stream",
        help="stream a file to a running specscribe server and print its events",
        description="Sends FILE (any audio or video file) to a specscribe server's /v1/listen WebSocket as "
        "16 kHz PCM at real-time pace, then prints the caption events as JSON lines or text.",
    )
    p.add_argument("file", metavar="FILE", help="audio or video file")
    p.add_argument("--url", default="ws://127.0.0.1:8000/v1/listen", help="server WebSocket URL (default: %(default)s)")
    p.add_argument("--language", default=None, help="ISO code such as en or de (default: detect)")
    p.add_argument("--task", default="transcribe", choices=("transcribe", "translate"))
    p.add_argument("--translate", action="store_true", help="also ask for English translations")
    p.add_argument("--format", default="text", choices=("text", "json"), help="text: caption lines and translations; json: every event, one per line")
    p.add_argument("--speed", type=float, default=1.0, help="1 = real time (default), 2 = twice as fast, 0 = as fast as possible")
    p.add_argument("--no-partials", action="store_true", help="do not ask for partial results")
    p.add_argument("--api-key", default=None, help="server API key (default: $SPECSCRIBE_API_KEY)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import math

    from specscribe.pipeline.audio import AudioError, load_audio
    from specscribe.web.client import StreamRequest

    if not math.isfinite(args.speed) or args.speed < 0:  # nan passes `< 0`
        return _fail(f"--speed must be a number >= 0 (0: as fast as possible), got {args.speed}", 2)
    try:
        audio = load_audio(args.file)
    except AudioError as exc:  # name the file, as `live --input` does
        return _fail(f"{args.file}: {exc}")
    request = StreamRequest(
        url=args.url, language=args.language, task=args.task, translate=args.translate,
        interim_results=not args.no_partials, speed=args.speed,
        api_key=args.api_key or os.environ.get("SPECSCRIBE_API_KEY"), tail_silence=1.0,
    )
    printer = _print_json if args.format == "json" else _print_text
    try:
        result = asyncio.run(_stream(audio, request, printer))
    except OSError as exc:
        return _fail(f"cannot connect to {args.url} ({exc.strerror or exc})")
    except Exception as exc:  # websockets' handshake errors (401, 403, bad URL, not a WebSocket server): one line
        if isinstance(exc, _handshake_errors()):
            return _fail(str(exc))
        raise
    if result.close_code not in (1000, None):
        print(f"specscribe stream: server closed the stream with code {result.close_code}", file=sys.stderr)
        return 1
    return 0


def _fail(message: str, code: int = 1) -> int:
    print(f"specscribe stream: error: {message}", file=sys.stderr)
    return code


def _handshake_errors() -> tuple[type[Exception], ...]:
    """The websockets exceptions of a connection that could not be set up (every subclass too: InvalidStatus,
    InvalidHeader, InvalidUpgrade, InvalidMessage ...). InvalidProxy is websockets 15's (a bad proxy URL)."""
    from websockets import exceptions as wx

    return (wx.InvalidHandshake, wx.InvalidURI, *((wx.InvalidProxy,) if hasattr(wx, "InvalidProxy") else ()))


async def _stream(audio, request, printer):
    """stream_audio with Ctrl-C: the first stops the audio and sends `close`, and the server's events (the finals of
    what was sent) are still printed until it closes; a second interrupts at once."""
    import asyncio
    import contextlib
    import signal

    from specscribe.web.client import stream_audio

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_sigint() -> None:
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)  # the next Ctrl-C is a KeyboardInterrupt: exit 130

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return await stream_audio(audio, request, printer, stop=stop)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)


def _print_json(msg: dict) -> None:
    print(json.dumps(msg, ensure_ascii=False), flush=True)


def _print_text(msg: dict) -> None:
    kind = msg["type"]
    if kind == "line":  # a caption line ends (its finals are in --json's output)
        print(f"[{msg['start']:7.2f} -> {msg['end']:7.2f}] {msg['text']}", flush=True)
    elif kind == "translation":
        print(f"{'':20} {msg['text']}", flush=True)
    elif kind in ("error", "busy"):
        print(f"specscribe stream: server {kind}: {msg.get('message', '')}", file=sys.stderr, flush=True)
