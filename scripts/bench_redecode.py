"""Streaming re-decodes replayed: how a re-decode's draft length adapts (SpecOptions.k_steps), same tokens.

A live session re-decodes its buffer at every update, drafting with its previous hypothesis
(pipeline/stream_jobs.py). Live runs are hard to compare side by side: how long each update takes
decides when the next one runs and what it decodes. So this records every decode of a live run
(bench_streaming.simulate on each clip, the default engine with the fixed drafting rule), then
replays the re-decodes (those with a previous hypothesis) one by one through the same engine, once
per --variants value of k_steps, interleaved, --repeat rounds (order reversed every other round).
Per variant: wall and process CPU seconds per round, and the decodes' target passes, rows drafted
and accepted. Every variant must decode the same tokens (`same_tokens`; lossless).

    python scripts/bench_redecode.py --set conversations --clips delivery,meeting --repeat 6 \
        --out benchmarks/<machine>/bench_redecode.json
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time


def record(engine, clips: dict, options) -> list:
    """Every (encoded, request) a live run of each clip decodes, in order."""
    from bench_streaming import simulate

    from specscribe.models.spec_engine import SpecEngine

    recorded, start = [], SpecEngine.start_decode

    def start_and_record(self, encoded, request, shared=False):
        recorded.append((encoded, request))
        return start(self, encoded, request, shared)

    SpecEngine.start_decode = start_and_record
    try:
        for audio in clips.values():
            asyncio.run(simulate(engine, audio, options, 0.25))
    finally:
        SpecEngine.start_decode = start
    return recorded


def replay(engine, decodes: list, k_steps: str) -> tuple[float, float, list, dict]:
    """(wall seconds, CPU seconds of the process, tokens per decode, summed stats) of the decodes with
    re-decodes' k_steps set."""
    from specscribe.models import spec_engine

    options_for = spec_engine.hypothesis_spec_options
    spec_engine.hypothesis_spec_options = lambda *a: dataclasses.replace(options_for(*a), k_steps=k_steps)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        results = [engine.decode(encoded, request) for encoded, request in decodes]
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        spec_engine.hypothesis_spec_options = options_for
    names = ("target_passes", "tokens", "drafted", "accepted")
    totals = {name: sum(getattr(r.stats, name) for r in results) for name in names}
    return seconds, cpu, [r.tokens for r in results], totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="conversations", help="clip sets (bench_streaming's names: jfk, librivox, "
                        "conversations, ...), comma-separated")
    parser.add_argument("--clips", default="delivery,meeting",
                        help="only clips whose name contains one of these, comma-separated (empty: all)")
    parser.add_argument("--variants", default="additive,multiplicative", help="k_steps values, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    args = parser.parse_args(argv)
    from bench_streaming import load_clips

    from specscribe.machine import cpu_times, machine_info, write_report
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.pipeline.types import StreamOptions

    since = cpu_times()
    wanted = [w for w in args.clips.split(",") if w]
    clips = {name: audio for name, audio in load_clips(args.set.split(",")).items()
             if not wanted or any(w in name for w in wanted)}
    engine = load_transcriber(EngineOptions(draft_policy="fixed"))
    decodes = [(e, r) for e, r in record(engine, clips, StreamOptions(language="en")) if r.hypothesis_tokens]
    variants = args.variants.split(",")
    seconds: dict[str, list[float]] = {v: [] for v in variants}
    cpu_seconds: dict[str, list[float]] = {v: [] for v in variants}
    tokens, totals = {}, {}
    for round_ in range(args.repeat):
        for variant in variants if round_ % 2 == 0 else variants[::-1]:
            s, cpu, tokens[variant], totals[variant] = replay(engine, decodes, variant)
            seconds[variant].append(round(s, 3))
            cpu_seconds[variant].append(round(cpu, 3))
            print(f"round {round_ + 1} {variant:15s} {s:.2f} s, CPU {cpu:.2f} s", file=sys.stderr, flush=True)
    medians = {v: statistics.median(s) for v, s in seconds.items()}
    cpu_medians = {v: statistics.median(s) for v, s in cpu_seconds.items()}
    report = {
        "machine": machine_info(engine.compute_type, since),
        "clips": list(clips),
        "redecodes": len(decodes),
        "repeat": args.repeat,
        "seconds": seconds,
        "median_s": medians,
        "speedup_over_first": {v: round(medians[variants[0]] / m, 3) for v, m in medians.items()},
        "cpu_seconds": cpu_seconds,
        "cpu_speedup_over_first": {v: round(cpu_medians[variants[0]] / m, 3) for v, m in cpu_medians.items()},
        "totals": totals,
        "same_tokens": all(t == tokens[variants[0]] for t in tokens.values()),
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
