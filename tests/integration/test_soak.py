"""The short soak (scripts/soak_server.py, 30 s on the ct2 engine, sampled every 0.5 s): good streams and misbehaving clients
join and leave; after warm-up the server's RSS and open fds do not grow, good sessions see no error,
every kind of bad client gets its documented answer, and the server still serves at the end.
The 30-minute run is the same script with --duration 1800 (docs/security.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "soak_server.py"


def test_short_soak(tmp_path, clips_dir, base_model_dir):
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--duration", "30", "--warmup", "10", "--sample-interval", "0.5", "--engine", "ct2", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    report = json.loads(out.read_text())
    assert proc.returncode == 0, (proc.stderr[-3000:], report["failures"])
    assert report["ok"] and report["failures"] == []
    assert report["growth"]["rss_mb"] <= 64 and report["growth"]["fds"] <= 4
    assert [q["sessions"] for q in report["quiet"]] == [0, 0]
    good = [s for s in report["sessions"] if s["role"] == "good"]
    assert len(good) >= 3 and all(s["problems"] == [] and s["finals"] > 0 for s in good)
    assert all(n >= 1 for n in report["chaos_sessions"].values()), report["chaos_sessions"]
    assert report["final_check"]["problems"] == [] and report["health"]["status"] == "ok"
    assert len(report["samples"]) >= 30 and all(s["fds"] > 0 and s["rss_mb"] > 0 for s in report["samples"])
