#!/usr/bin/env python
"""Soak test of `specscribe serve`: clients join and leave for --duration seconds; does the server leak or break?

A server subprocess runs on loopback. Throughout, --good clients stream real clips (JFK, LibriVox) at real-time
pace over /v1/listen and check their session (close 1000, no error event, some finals), while --chaos clients
cycle through bad behaviour, each checked for the server's documented answer:

    abrupt      config + 1.5 s of audio, then the TCP connection is cut (no close frame)
    garbage     config, then malformed JSON, an unknown message type, an odd-length audio frame, then close
                (non-fatal `error` events, close 1000); and a connection whose first frame is audio (close 4000)
    oversized   config, then a frame one byte over --max-frame-bytes (close 1009)
    slow        streams a clip but reads nothing until it has sent it all, then reads one event per 0.2 s

The run has two phases, warm-up (--warmup seconds, default a quarter of the duration, at most 120 s) and main.
After each, the clients stop, the server is left to go idle (no session), and a quiet sample is taken: the
growth of RSS and open file descriptors from the first quiet sample to the second is the leak measure.
Throughout, the server's RSS, open fds and sessions are sampled every --sample-interval seconds (the report
gives their slope over the second half too: a leak climbs steadily, caches level off). At the end
one more good stream and /healthz must succeed. Prints (and with --out writes) one JSON document; exit status
1 if a check failed: growth over --max-rss-growth-mb / --max-fd-growth, an error on a good session, an
unexpected answer to a chaos client, or a server that stopped serving.

    nice python scripts/soak_server.py --duration 1800 --out artifacts/soak_server.json
    python scripts/soak_server.py --duration 30 --warmup 10 --sample-interval 0.5 --engine ct2   # what the tests run
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16_000
CHAOS_KINDS = ("abrupt", "garbage", "oversized", "slow")


@dataclass(frozen=True)
class Settings:
    """Attributes: duration, warmup, good (concurrent good clients), chaos (concurrent chaos clients),
    sample_interval (seconds), max_frame_bytes (the server's limit), max_rss_growth_mb, max_fd_growth."""

    duration: float
    warmup: float
    good: int
    chaos: int
    sample_interval: float
    max_frame_bytes: int
    max_rss_growth_mb: float
    max_fd_growth: int


async def _drain(ws, pause: float = 0.0) -> list[dict]:
    """Every message until the server closes (whatever the close code), pausing between reads."""
    import websockets

    messages = []
    try:
        async for text in ws:
            messages.append(json.loads(text))
            if pause:
                await asyncio.sleep(pause)
    except websockets.ConnectionClosed:
        pass
    return messages


def load_clips() -> list[tuple[str, np.ndarray]]:
    from specscribe.clips import clips_dir, librivox_clips
    from specscribe.pipeline.audio import load_audio

    clips = [("jfk", load_audio(clips_dir() / "jfk.flac"))]
    clips += [(path.stem[-4:], load_audio(path)) for path in sorted(librivox_clips())]
    return clips


def start_server(engine: str, model: str, max_frame_bytes: int, extra: list[str], log_file) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "specscribe", "serve", "--port", "0", "--engine", engine, "--model", model,
           "--max-frame-bytes", str(max_frame_bytes), "--idle-timeout", "10", "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, text=True)
    line = proc.stdout.readline()
    match = re.search(r"serving http://([^/\s]+)/", line)
    if not match:
        proc.kill()
        raise SystemExit(f"soak_server: the server did not start: {line!r}")
    return proc, match.group(1)


class Soak:
    """One soak run against one server: the clients, the samples and the verdict."""

    def __init__(self, settings: Settings, clips, host: str, server_pid: int) -> None:
        import psutil

        self.s, self.clips, self.host = settings, clips, host
        self.url = f"ws://{host}/v1/listen"
        self.proc = psutil.Process(server_pid)
        self.t0 = time.monotonic()
        self.turns = {"good": 0, "chaos": 0}  # clips and chaos kinds go round across phases
        self.samples: list[dict] = []
        self.sessions: list[dict] = []  # one record per client session
        self.quiet: list[dict] = []

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    # ---- server state --------------------------------------------------------------------------
    def sample(self) -> dict:
        return {"t": self.now(), "rss_mb": round(self.proc.memory_info().rss / 2**20, 1), "fds": self.proc.num_fds(),
                "connections": len(self.proc.net_connections(kind="tcp"))}

    async def healthz(self) -> dict:
        import httpx

        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"http://{self.host}/healthz")
            response.raise_for_status()
            return response.json()

    async def monitor(self, stop: asyncio.Event) -> None:
        import psutil

        while not stop.is_set():
            try:
                self.samples.append(self.sample())
            except psutil.Error:  # the server is gone; the clients and the final check say so
                return
            try:
                await asyncio.wait_for(stop.wait(), self.s.sample_interval)
            except asyncio.TimeoutError:
                pass

    async def quiet_sample(self, label: str) -> dict:
        """Wait (bounded) until the server has no session and its connections are gone, then sample."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (await self.healthz())["sessions"] == 0 and self.sample()["connections"] <= 1:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(3.0)  # the model idle for a while: freed memory went back (pipeline/memory.py)
        point = {"label": label, **self.sample(), "sessions": (await self.healthz())["sessions"]}
        self.quiet.append(point)
        return point

    # ---- clients -------------------------------------------------------------------------------
    async def good(self, name: str, audio: np.ndarray) -> dict:
        from specscribe.web.client import StreamRequest, stream_audio

        request = StreamRequest(url=self.url, language="en", speed=1.0, tail_silence=1.0)
        result = await asyncio.wait_for(stream_audio(audio, request), len(audio) / SAMPLE_RATE * 4 + 60)
        latency = [m["received_at"] - m["end"] for m in result.finals]
        problems = [f"{m['type']}: {m.get('code', '')}" for m in result.errors]
        if result.close_code != 1000:
            problems.append(f"close {result.close_code}")
        if not result.finals:
            problems.append("no final")
        return {"clip": name, "finals": len(result.finals), "problems": problems,
                "latency_median": round(statistics.median(latency), 3) if latency else None,
                "latency_max": round(max(latency), 3) if latency else None}

    async def chaos(self, kind: str, audio: np.ndarray) -> dict:
        import websockets

        pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
        config = json.dumps({"type": "config", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "language": "en"})
        problems: list[str] = []
        if kind == "garbage":  # first a connection whose first frame is not a config
            async with websockets.connect(self.url) as ws:
                await ws.send(b"\x00\x01garbage")
                errors = await _drain(ws)
            if ws.close_code != 4000 or not errors or errors[-1].get("code") != "protocol_error":
                problems.append(f"audio first: close {ws.close_code}")
        async with websockets.connect(self.url, max_queue=4) as ws:
            await ws.send(config)
            ready = json.loads(await ws.recv())
            if ready.get("type") != "ready":
                problems.append(f"no ready: {ready.get('type')}")
            if kind == "abrupt":
                for i in range(0, min(len(pcm), 2 * SAMPLE_RATE * 3 // 2), 3200):
                    await ws.send(pcm[i : i + 3200])
                    await asyncio.sleep(0.1)
                ws.transport.abort()  # no close frame, no closing handshake
                return {"kind": kind, "problems": problems}
            if kind == "garbage":
                for frame in ("{not json", json.dumps({"type": "nope"}), b"\x01\x02\x03", pcm[:6400]):
                    await ws.send(frame)
                await ws.send(json.dumps({"type": "close"}))
            elif kind == "oversized":
                await ws.send(b"\x00" * (self.s.max_frame_bytes + 1))
            elif kind == "slow":
                for i in range(0, len(pcm), 3200):  # real-time pace, reading nothing
                    await ws.send(pcm[i : i + 3200])
                    await asyncio.sleep(0.1)
                await ws.send(json.dumps({"type": "close"}))
            messages = await _drain(ws, pause=0.2 if kind == "slow" else 0.0)
            codes = [m.get("code") for m in messages if m["type"] == "error"]
            expected = {"garbage": (1000,), "oversized": (1009,), "slow": (1000, 4010)}[kind]
            if ws.close_code not in expected:
                problems.append(f"close {ws.close_code}, expected {expected}")
            if kind == "garbage" and not {"malformed_json", "unknown_type", "bad_audio_frame"} <= set(codes):
                problems.append(f"garbage errors {codes}")
        return {"kind": kind, "problems": problems}

    async def client_loop(self, role: str, until: float) -> None:
        while time.monotonic() < until:
            n = self.turns[role]
            self.turns[role] += 1
            name, audio = self.clips[n % len(self.clips)]
            kind = "good" if role == "good" else CHAOS_KINDS[n % len(CHAOS_KINDS)]
            started = self.now()
            try:
                record = await (self.good(name, audio) if role == "good" else self.chaos(kind, audio))
            except Exception as exc:  # a client that could not even talk to the server
                record = {"problems": [f"{type(exc).__name__}: {exc}"]}
                await asyncio.sleep(1.0)  # a dead server must not turn this into a busy loop
            self.sessions.append({"t": started, "end": self.now(), "role": role, "kind": kind, **record})

    async def phase(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        loops = [self.client_loop("good", until) for _ in range(self.s.good)]
        loops += [self.client_loop("chaos", until) for _ in range(self.s.chaos)]
        await asyncio.gather(*loops)

    async def run(self) -> dict:
        stop = asyncio.Event()
        monitor = asyncio.create_task(self.monitor(stop))
        try:
            await self.phase(self.s.warmup)
            start = await self.quiet_sample("after warm-up")
            await self.phase(max(0.0, self.s.duration - self.s.warmup))
            end = await self.quiet_sample("end")
            final = await self.good(*self.clips[0])  # the server still serves
            health = await self.healthz()
        except Exception as exc:  # the server died or hung: report what was seen until then
            start = end = {"rss_mb": 0.0, "fds": 0}
            final, health = {"problems": [f"{type(exc).__name__}: {exc}"]}, {}
        finally:
            stop.set()
            await monitor
        return self.report(start, end, final, health)

    def report(self, start: dict, end: dict, final: dict, health: dict) -> dict:
        good = [r for r in self.sessions if r["role"] == "good"]
        chaos = [r for r in self.sessions if r["role"] == "chaos"]
        latencies = [r["latency_median"] for r in good if r.get("latency_median") is not None]
        rss_growth = round(end["rss_mb"] - start["rss_mb"], 1)
        fd_growth = end["fds"] - start["fds"]
        failures = []
        if rss_growth > self.s.max_rss_growth_mb:
            failures.append(f"RSS grew {rss_growth} MB after warm-up (limit {self.s.max_rss_growth_mb})")
        if fd_growth > self.s.max_fd_growth:
            failures.append(f"open fds grew by {fd_growth} after warm-up (limit {self.s.max_fd_growth})")
        failures += [f"good session at {r['t']} s: {p}" for r in good for p in r["problems"]]
        failures += [f"{r['kind']} session at {r['t']} s: {p}" for r in chaos for p in r["problems"]]
        if final["problems"] or health.get("status") != "ok":
            failures.append(f"the server stopped serving: {final['problems']} {health}")
        return {
            "settings": dataclasses.asdict(self.s),
            "ok": not failures,
            "failures": failures,
            "growth": {"rss_mb": rss_growth, "fds": fd_growth, "late_rss_mb_per_hour": late_slope(self.samples)},
            "quiet": self.quiet,
            "good_sessions": len(good),
            "chaos_sessions": {k: sum(r["kind"] == k for r in chaos) for k in CHAOS_KINDS},
            "latency_median_of_medians": round(statistics.median(latencies), 3) if latencies else None,
            "latency_max": max((r["latency_max"] for r in good if r.get("latency_max") is not None), default=None),
            "final_check": final,
            "health": health,
            "sessions": self.sessions,
            "samples": self.samples,
        }


def late_slope(samples: list[dict]) -> float | None:
    """RSS slope over the second half of the run, MB per hour (least squares over the samples taken while
    clients ran): a leak keeps climbing at a steady rate, caches and allocator arenas level off."""
    late = [s for s in samples if s["t"] >= samples[-1]["t"] / 2] if samples else []
    if len(late) < 10:
        return None
    t = np.array([s["t"] for s in late])
    rss = np.array([s["rss_mb"] for s in late])
    return round(float(np.polyfit(t, rss, 1)[0]) * 3600, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of clients, warm-up included (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds (default: duration / 4, at most 120)")
    parser.add_argument("--engine", default="ct2", help="server engine (default: %(default)s)")
    parser.add_argument("--model", default="base")
    parser.add_argument("--good", type=int, default=1, help="concurrent good clients (default: %(default)s)")
    parser.add_argument("--chaos", type=int, default=1, help="concurrent misbehaving clients (default: %(default)s)")
    parser.add_argument("--sample-interval", type=float, default=1.0, help="seconds between samples of RSS and fds")
    parser.add_argument("--max-frame-bytes", type=int, default=256 * 1024, help="the server's frame limit")
    parser.add_argument("--max-rss-growth-mb", type=float, default=64.0)
    parser.add_argument("--max-fd-growth", type=int, default=4)
    parser.add_argument("--server-arg", action="append", default=[], help="extra `specscribe serve` argument (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.duration <= 0:
        parser.error("--duration must be positive")
    warmup = args.warmup if args.warmup is not None else min(120.0, args.duration / 4)
    settings = Settings(args.duration, min(warmup, args.duration), args.good, args.chaos, args.sample_interval,
                        args.max_frame_bytes, args.max_rss_growth_mb, args.max_fd_growth)
    from specscribe.machine import cpu_times, machine_info
    from specscribe.models.compute import resolve_compute_type

    started = cpu_times()
    clips = load_clips()
    with tempfile.TemporaryFile("w+") as log_file:
        proc, host = start_server(args.engine, args.model, args.max_frame_bytes, args.server_arg, log_file)
        try:
            report = asyncio.run(Soak(settings, clips, host, proc.pid).run())
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.seek(0)
        server_log = log_file.read().splitlines()
    report = {"engine": args.engine, "model": args.model, "machine": machine_info(resolve_compute_type("auto", "cpu") if args.engine == "spec" else None, since=started),
              **report, "server_log_tail": server_log[-50:]}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    summary = (f"soak_server: {'ok' if report['ok'] else 'FAILED'}; {report['good_sessions']} good sessions, chaos "
               f"{report['chaos_sessions']}, growth RSS {report['growth']['rss_mb']} MB, fds {report['growth']['fds']}")
    print(summary, *report["failures"], sep="\n  ", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
