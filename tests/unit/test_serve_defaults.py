"""`specscribe serve`'s default session limit follows the machine: a CPU without AVX512-BF16 or AMX (float32)
serves about 4 live streams in time, a bf16 CPU or a GPU many more (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specscribe.commands import serve as serve_cmd
from specscribe.commands.serve import MAX_CLIENTS, MAX_CLIENTS_SLOW_CPU, default_max_clients

AVX2 = {"sse4_2", "avx", "avx2", "fma"}


def test_the_default_limit_by_cpu_and_device():
    assert MAX_CLIENTS_SLOW_CPU < MAX_CLIENTS
    assert default_max_clients("auto", AVX2, nvidia=False) == MAX_CLIENTS_SLOW_CPU
    assert default_max_clients("cpu", AVX2 | {"avx512f"}, nvidia=False) == MAX_CLIENTS_SLOW_CPU
    assert default_max_clients("cpu", AVX2, nvidia=True) == MAX_CLIENTS_SLOW_CPU  # told to run on the CPU
    for flags in (AVX2 | {"avx512f", "avx512_bf16"}, AVX2 | {"amx_bf16", "amx_tile"}):
        assert default_max_clients("auto", flags, nvidia=False) == MAX_CLIENTS
    assert default_max_clients("cuda", AVX2, nvidia=False) == MAX_CLIENTS
    assert default_max_clients("auto", AVX2, nvidia=True) == MAX_CLIENTS
    assert default_max_clients("auto", set(), nvidia=False) == MAX_CLIENTS  # flags unreadable: as before


@pytest.fixture
def started(monkeypatch, tmp_path):
    """Runs `serve` up to the server (not started): returns the ServerOptions it would serve with."""
    from specscribe.web import server

    seen = {}

    class Sock:
        def getsockname(self):
            return ("127.0.0.1", 8123)

    async def no_serve(app, sock, options, log_level):
        seen["options"] = options

    monkeypatch.setattr(server, "bind_socket", lambda host, port: Sock())
    monkeypatch.setattr(server, "create_app", lambda *a, **k: object())
    monkeypatch.setattr(server, "serve", no_serve)
    monkeypatch.setattr(serve_cmd, "NVIDIA_DRIVER", tmp_path / "no-driver")

    def run(flags: set[str], *argv: str):
        from specscribe.cli import main

        monkeypatch.setattr(serve_cmd, "cpu_flags", lambda: flags)
        assert main(["serve", "--port", "0", *argv]) == 0
        return seen.pop("options")

    return run


def test_serve_caps_a_float32_cpu_and_says_so(started, capsys):
    options = started(AVX2)
    assert options.limits.max_clients == MAX_CLIENTS_SLOW_CPU
    assert options.max_connections == 64
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("loading ")  # scripts read this line first (tests/integration/test_replicas.py)
    assert f"at most {MAX_CLIENTS_SLOW_CPU} live sessions" in err and "--max-clients N" in err


def test_serve_keeps_the_wide_default_on_bf16_and_any_explicit_limit(started, capsys):
    assert started(AVX2 | {"avx512_bf16"}).limits.max_clients == MAX_CLIENTS
    assert started(AVX2, "--max-clients", "9").limits.max_clients == 9
    assert "live sessions" not in capsys.readouterr().err
