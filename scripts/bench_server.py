#!/usr/bin/env python
"""Load test of `specscribe serve` on loopback: N concurrent WebSocket clients stream real clips at real-time pace.

For each engine (the ct2 baseline and spec, side by side in the same run) it starts a server subprocess, then for
each N in --clients runs N clients at once. Client i streams clip i mod K (JFK and the five LibriVox clips) with
language=en. Reported per N: final latency (wall time a final arrived minus the audio time its last word ended,
the audio being sent in real time) median / p90 over all finals and the median of per-client medians; the
server's CPU (cores used) and peak RSS; errors (error/busy messages, close codes other than 1000); and
correctness: each client's transcript must match its own clip's reference (WER) better than any other clip's,
so a lost or mixed-up stream is counted. Prints one JSON document; a summary goes to stderr.

    nice python scripts/bench_server.py --clients 1,4,8,16 --engines ct2,spec --out artifacts/bench_server.json

Bounded: each N run has a deadline (clip length x --slack + 60 s) and the script ends by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LATENCY_LIMIT = 2.5  # seconds: the N at which the p90 final latency passes this is reported


def words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def wer(ref: str, hyp: str) -> float:
    import jiwer

    return float(jiwer.wer(words(ref), words(hyp) or "<empty>"))


def load_clips() -> list[tuple[str, np.ndarray, str]]:
    from specscribe.clips import JFK_TEXT, clips_dir, librivox_clips
    from specscribe.pipeline.audio import load_audio

    clips = [("jfk", load_audio(clips_dir() / "jfk.flac"), JFK_TEXT)]
    for path, ref in sorted(librivox_clips().items()):
        clips.append((path.stem[-4:], load_audio(path), ref))
    return clips


def start_server(engine: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "specscribe", "serve", "--port", "0", "--engine", engine, "--max-clients", "64",
           "--max-backlog-seconds", "600", "--log-level", "error", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    match = re.search(r"serving http://([^/\s]+)/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"bench_server: the {engine} server did not start: {line!r}")
    return proc, f"ws://{match.group(1)}/v1/listen"


async def run_level(url: str, n: int, clips, server_pid: int, slack: float) -> dict:
    import psutil

    from specscribe.web.client import StreamRequest, stream_audio

    proc = psutil.Process(server_pid)
    request = StreamRequest(url=url, language="en", speed=1.0, tail_silence=1.5)
    picks = [clips[i % len(clips)] for i in range(n)]
    longest = max(len(c[1]) for c in picks) / 16000
    rss_peak = [proc.memory_info().rss]
    stop = asyncio.Event()

    async def sample_rss() -> None:  # a monitor, not a work loop: one sample every 0.25 s until stopped
        while not stop.is_set():
            rss_peak[0] = max(rss_peak[0], proc.memory_info().rss)
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except asyncio.TimeoutError:
                pass

    sampler = asyncio.create_task(sample_rss())
    cpu0, t0 = proc.cpu_times(), time.monotonic()
    deadline = longest * slack + 60
    tasks = [asyncio.create_task(stream_audio(audio, request)) for _, audio, _ in picks]
    done, pending = await asyncio.wait(tasks, timeout=deadline)
    for task in pending:
        task.cancel()
    wall = time.monotonic() - t0
    cpu1 = proc.cpu_times()
    stop.set()
    await sampler

    latencies, client_medians, clients = [], [], []
    errors = lost = mixed = 0
    for i, (task, (name, _, ref)) in enumerate(zip(tasks, picks)):
        if task not in done or task.exception() is not None:
            lost += 1
            errors += 1
            clients.append({"client": i, "clip": name, "error": "timeout" if task not in done else repr(task.exception())})
            continue
        result = task.result()
        lat = [m["received_at"] - m["end"] for m in result.finals]
        latencies += lat
        if lat:
            client_medians.append(statistics.median(lat))
        own = wer(ref, result.text)
        others = [wer(other_ref, result.text) for other_name, _, other_ref in clips if other_name != name]
        is_mixed = bool(others) and own >= min(others)
        is_lost = not result.finals or own > 0.5
        bad_close = result.close_code != 1000
        errors += len(result.errors) + int(bad_close)
        lost += int(is_lost)
        mixed += int(is_mixed and not is_lost)
        clients.append({"client": i, "clip": name, "wer": round(own, 3), "finals": len(result.finals),
                        "close_code": result.close_code, "median_latency": round(statistics.median(lat), 3) if lat else None})
    return {
        "clients": n,
        "finals": len(latencies),
        "latency_median": round(statistics.median(latencies), 3) if latencies else None,
        "latency_p90": round(float(np.percentile(latencies, 90)), 3) if latencies else None,
        "latency_max": round(max(latencies), 3) if latencies else None,
        "client_median_latency_median": round(statistics.median(client_medians), 3) if client_medians else None,
        "server_cpu_cores": round(((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall, 3),
        "server_rss_peak_mb": round(rss_peak[0] / 2**20, 1),
        "errors": errors, "lost": lost, "mixed_up": mixed, "wall_s": round(wall, 2),
        "per_client": clients,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,8,16", help="comma-separated N (default: %(default)s)")
    parser.add_argument("--engines", default="ct2,spec", help="engines, baseline first (default: %(default)s)")
    parser.add_argument("--slack", type=float, default=6.0, help="deadline per level = longest clip x slack + 60 s")
    parser.add_argument("--server-arg", action="append", default=[], help="extra `specscribe serve` argument (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    levels = [int(x) for x in args.clients.split(",") if x.strip()]
    clips = load_clips()
    report = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "latency_limit_s": LATENCY_LIMIT,
              "clips": [c[0] for c in clips], "engines": {}}
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        proc, url = start_server(engine, args.server_arg)
        try:
            rows = []
            for n in levels:
                row = asyncio.run(run_level(url, n, clips, proc.pid, args.slack))
                rows.append(row)
                print(f"[{engine}] N={n:2d}: latency median {row['latency_median']} s, p90 {row['latency_p90']} s, "
                      f"cpu {row['server_cpu_cores']} cores, rss {row['server_rss_peak_mb']} MB, errors {row['errors']}, "
                      f"lost {row['lost']}, mixed {row['mixed_up']}", file=sys.stderr, flush=True)
            over = [r["clients"] for r in rows if r["latency_p90"] is None or r["latency_p90"] > LATENCY_LIMIT]
            report["engines"][engine] = {"levels": rows, "first_n_with_p90_over_limit": over[0] if over else None}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    report["machine"]["loadavg_end"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
