"""What the CLI costs before a command runs: building the parser imports no heavy module, and only
the program itself (not an in-process call of main) freezes the garbage collector before exit."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_parser_imports_nothing_heavy():
    code = (
        "import sys; from specscribe.cli import build_parser; build_parser()\n"
        "print(sorted(m for m in ('torch', 'numpy', 'asyncio', 'av', 'faster_whisper', 'specscribe.clips') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_main_called_in_process_leaves_the_collector_alone(capsys):
    from specscribe.cli import main

    before = gc.get_freeze_count()
    assert main(["clips", "path"]) == 0
    assert capsys.readouterr().out.strip()
    assert gc.get_freeze_count() == before
