#!/usr/bin/env python
"""Load test of `specscribe serve` on loopback: N concurrent WebSocket clients stream real speech at real-time pace.

Configs run side by side in one run, level by level, in rotating order (each config its own server subprocess,
started once): `spec` (the default server, decodes of all sessions sharing target passes), `spec:w1` (the same
with --decode-width 1: decodes one by one), `ct2` (the baseline engine), and `base=PYTHON` (the server of another
checkout, e.g. the round-robin scheduler before this one: `base=/path/.venv/bin/python`).

Client i streams clips i, i+1, ... (JFK and the five LibriVox clips, 0.5 s apart) until --stream-seconds, with
language=en, in 0.2 s frames. Reported per N: final latency (client clock: the time a final arrived minus the
audio time its last word ended) median / p90 / max, partial latency likewise, WER per client, the server's load
level (polled /healthz), clients refused with `busy`, admitted sessions that lost text (no finals, WER > 0.5, or
an error close) or got another stream's text, server CPU (cores) with its busiest threads, and peak RSS. Prints
one JSON document (with the machine's CPU, flags and compute type); a summary goes to stderr.

    nice python scripts/bench_server.py --clients 1,4,8,12,16,24 --configs spec,spec:w1 --out artifacts/bench_server.json

Bounded: each level has a deadline (stream length x --slack + 60 s) and the script ends by itself.
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
import tempfile
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


def make_streams(clips, n: int, seconds: float) -> list[tuple[str, np.ndarray, str]]:
    """Client i's stream: clips i, i+1, ... 0.5 s apart until `seconds` (name, audio, reference)."""
    gap = np.zeros(8000, dtype=np.float32)
    streams = []
    for i in range(n):
        parts, refs, names, total, j = [], [], [], 0.0, i
        while total < seconds or not parts:
            name, audio, ref = clips[j % len(clips)]
            parts += [audio, gap]
            refs.append(ref)
            names.append(name)
            total += audio.size / 16000 + 0.5
            j += 1
        streams.append(("+".join(names), np.concatenate(parts), " ".join(refs)))
    return streams


def parse_config(spec: str) -> tuple[str, list[str], list[str]]:
    """"spec", "spec:w1", "ct2" or "base=PYTHON" -> (name, python command, serve arguments)."""
    if spec.startswith("base="):
        return "base", [spec.split("=", 1)[1]], ["--engine", "spec"]
    engine, _, width = spec.partition(":w")
    return spec, [sys.executable], ["--engine", engine] + (["--decode-width", width] if width else [])


def start_server(python: list[str], args: list[str], extra: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [*python, "-m", "specscribe", "serve", "--port", "0", "--max-clients", "64", "--log-level", "error", *args, *extra]
    # outside any checkout, so that `-m specscribe` is the one installed for that python
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tempfile.gettempdir())
    line = proc.stdout.readline()
    match = re.search(r"serving http://([^/\s]+)/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"bench_server: the server {cmd} did not start: {line!r}")
    return proc, match.group(1)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per thread of a process (Linux /proc)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def health(host: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://{host}/healthz", timeout=5) as r:
        return json.loads(r.read())


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


async def run_level(host: str, n: int, clips, server_pid: int, seconds: float, slack: float) -> dict:
    import psutil

    from specscribe.web.client import StreamRequest, stream_audio

    proc = psutil.Process(server_pid)
    request = StreamRequest(url=f"ws://{host}/v1/listen", language="en", speed=1.0, tail_silence=1.5, chunk_seconds=0.2)
    streams = make_streams(clips, n, seconds)
    longest = max(a.size for _, a, _ in streams) / 16000
    rss_peak, levels = [proc.memory_info().rss], []
    stop = asyncio.Event()

    async def monitor() -> None:  # one sample a second until stopped (RSS, load level)
        while not stop.is_set():
            rss_peak[0] = max(rss_peak[0], proc.memory_info().rss)
            try:
                levels.append((await asyncio.to_thread(health, host)).get("load", {}).get("level"))
            except Exception:
                pass
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    sampler = asyncio.create_task(monitor())
    cpu0, threads0, t0 = proc.cpu_times(), thread_cpu(server_pid), time.monotonic()
    tasks = [asyncio.create_task(stream_audio(audio, request)) for _, audio, _ in streams]
    done, pending = await asyncio.wait(tasks, timeout=longest * slack + 60)
    for task in pending:
        task.cancel()
    wall = time.monotonic() - t0
    cpu1, threads1 = proc.cpu_times(), thread_cpu(server_pid)
    stop.set()
    await sampler

    finals_lat, partial_lat, clients = [], [], []
    errors = lost = mixed = refused = 0
    for i, (task, (name, _, ref)) in enumerate(zip(tasks, streams)):
        if task not in done or task.exception() is not None:
            lost += 1
            clients.append({"client": i, "clips": name, "error": "timeout" if task not in done else repr(task.exception())})
            continue
        result = task.result()
        if any(m["type"] == "busy" for m in result.messages):
            refused += 1
            clients.append({"client": i, "clips": name, "refused": True})
            continue
        lat = [m["received_at"] - m["end"] for m in result.finals]
        finals_lat += lat
        partial_lat += [m["received_at"] - m["end"] for m in result.messages if m["type"] == "partial" and m.get("text")]
        own = wer(ref, result.text)
        others = [wer(other_ref, result.text) for other_name, _, other_ref in streams if other_name != name]
        is_lost = not result.finals or own > 0.5 or result.close_code != 1000
        is_mixed = bool(others) and own >= min(others) and not is_lost
        errors += len(result.errors)
        lost += int(is_lost)
        mixed += int(is_mixed)
        stats = next((m["stats"] for m in reversed(result.messages) if m["type"] == "stats"), {})
        clients.append({"client": i, "clips": name, "wer": round(own, 3), "finals": len(result.finals),
                        "close_code": result.close_code, "median_latency": round(statistics.median(lat), 3) if lat else None,
                        "updates": stats.get("updates"), "continued": stats.get("continued"),
                        "withdrawn": stats.get("withdrawn"), "load_at_end": stats.get("load")})
    busiest = sorted(((threads1.get(t, 0) - threads0.get(t, 0), t) for t in threads1), reverse=True)[:4]
    return {
        "clients": n,
        "stream_seconds": round(longest, 1),
        "finals": len(finals_lat),
        "latency_median": round(statistics.median(finals_lat), 3) if finals_lat else None,
        "latency_p90": pct(finals_lat, 90),
        "latency_max": round(max(finals_lat), 3) if finals_lat else None,
        "partial_latency_median": round(statistics.median(partial_lat), 3) if partial_lat else None,
        "partial_latency_p90": pct(partial_lat, 90),
        "load_level_max": max((lv for lv in levels if lv is not None), default=None),
        "load_levels": levels,
        "server_cpu_cores": round(((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall, 3),
        # the event loop is the main thread (tid == pid); the model thread and torch's workers are the others
        "server_busiest_threads_cores": [{"main": t == server_pid, "cores": round(c / wall, 3)} for c, t in busiest],
        "server_rss_peak_mb": round(rss_peak[0] / 2**20, 1),
        "refused": refused, "errors": errors, "lost": lost, "mixed_up": mixed, "wall_s": round(wall, 2),
        "wer_mean_admitted": round(statistics.mean(c["wer"] for c in clients if "wer" in c), 4) if any("wer" in c for c in clients) else None,
        "per_client": clients,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,8,12,16,24", help="comma-separated N (default: %(default)s)")
    parser.add_argument("--configs", default="spec,spec:w1",
                        help="servers compared: spec, spec:wN (--decode-width N), ct2, base=PYTHON (default: %(default)s)")
    parser.add_argument("--stream-seconds", type=float, default=30.0, help="audio each client streams (default: %(default)s)")
    parser.add_argument("--slack", type=float, default=3.0, help="deadline per level = stream length x slack + 60 s")
    parser.add_argument("--server-arg", action="append", default=[], help="extra `specscribe serve` argument (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    from specscribe.machine import cpu_times

    started = cpu_times()
    from specscribe.machine import machine_info, steal_share
    from specscribe.models.compute import resolve_compute_type

    levels = [int(x) for x in args.clients.split(",") if x.strip()]
    configs = [parse_config(c.strip()) for c in args.configs.split(",") if c.strip()]
    clips = load_clips()
    report = {"machine": {**machine_info(resolve_compute_type("auto", "cpu")), "loadavg_start": os.getloadavg()},
              "latency_limit_s": LATENCY_LIMIT, "clips": [c[0] for c in clips], "stream_seconds": args.stream_seconds,
              "configs": {name: {"command": cmd + serve, "levels": []} for name, cmd, serve in configs}}
    servers = {}
    try:
        for name, cmd, serve in configs:
            servers[name] = start_server(cmd, serve, args.server_arg)
        for k, n in enumerate(levels):
            order = configs[k % len(configs):] + configs[: k % len(configs)]  # rotate who goes first
            for name, _, _ in order:
                proc, host = servers[name]
                row = asyncio.run(run_level(host, n, clips, proc.pid, args.stream_seconds, args.slack))
                report["configs"][name]["levels"].append(row)
                print(f"[{name}] N={n:2d}: final latency median {row['latency_median']} s, p90 {row['latency_p90']} s; "
                      f"partial median {row['partial_latency_median']} s; load max {row['load_level_max']}; "
                      f"cpu {row['server_cpu_cores']} cores; rss {row['server_rss_peak_mb']} MB; refused {row['refused']}, "
                      f"errors {row['errors']}, lost {row['lost']}, mixed {row['mixed_up']}; wer {row['wer_mean_admitted']}",
                      file=sys.stderr, flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    for entry in report["configs"].values():
        entry["levels"].sort(key=lambda r: r["clients"])
        over = [r["clients"] for r in entry["levels"] if r["latency_p90"] is None or r["latency_p90"] > LATENCY_LIMIT]
        entry["first_n_with_p90_over_limit"] = over[0] if over else None
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["machine"]["cpu_steal_share"] = steal_share(started, cpu_times())
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
