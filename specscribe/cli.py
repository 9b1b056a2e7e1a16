"""The `specscribe` command. Each subcommand lives in specscribe/commands/<name>.py and defines
``add_parser(subparsers)`` (which sets ``func``); nothing is parsed at import time."""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import sys

COMMANDS = ("transcribe", "live", "serve", "stream", "models", "clips")


def build_parser() -> argparse.ArgumentParser:
    from specscribe import __version__

    parser = argparse.ArgumentParser(
        prog="specscribe",
        description="Real-time speech recognition and translation with speculative Whisper decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specscribe {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"specscribe.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"specscribe.commands.{name}":
                continue  # not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # expected errors carry a user message; others keep their traceback
        from specscribe.models.errors import ModelError
        from specscribe.pipeline.audio import AudioError

        if isinstance(exc, (ModelError, AudioError)):
            print(f"specscribe: error: {exc}", file=sys.stderr)
            return 1
        raise
    finally:
        if argv is None:  # the program itself, which exits next
            # The interpreter's last garbage collections walk every object torch created (about
            # 0.25 s of a 3 s `transcribe`); frozen objects are skipped. Nothing is left to collect
            # that matters: outputs are written and closed, and atexit handlers still run.
            gc.freeze()
