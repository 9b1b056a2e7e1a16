"""The measured drafting policy (--draft auto --draft-policy measured, the default) against the fixed
rule and against no drafts, side by side in one run. JSON out.

    python scripts/bench_policy.py [--lanes 1,16] [--repeat 2] [--out bench.json]

The jobs of scripts/bench_adapt.py, as `specscribe transcribe` runs them (pipeline/longform.py
transcribe_audio): the 203 s lecture, and a folder of eight recordings decoded one after another by
one engine (so the policy carries over between files). Each job runs at every --lanes value (1:
windows in order, one decode per pass, --batch-size 1; 16: the CLI's default batch, windows
sharing passes). Sides: none (--draft none), fixed (--draft auto --draft-policy fixed), measured;
each side loads a fresh engine; the order of the sides rotates every repeat. Reported per side:
wall time (model load included), tokens per target pass, acceptance, the policy's table (arm ->
decodes, tokens per ms per context), and whether the text equals --draft none's.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench_adapt import clip_paths, run_side

SIDES = {"none": {"draft": "none"}, "fixed": {"draft_policy": "fixed"}, "measured": {"draft_policy": "measured"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-")
    parser.add_argument("--lanes", default="1,16", help="comma-separated lane counts (1: --batch-size 1)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", default="lecture,folder")
    args = parser.parse_args(argv)
    from specscribe.machine import cpu_times, machine_info, write_report
    from specscribe.models.engines import EngineOptions

    since = cpu_times()
    paths = clip_paths()
    report: dict = {"sides": SIDES, "repeat": args.repeat, "order": "sides rotated by one each repeat", "jobs": {}}
    compute_type = None
    labels = list(SIDES)
    for job in args.jobs.split(","):
        for lanes in (int(n) for n in args.lanes.split(",")):
            runs: dict[str, list] = {label: [] for label in labels}
            for r in range(args.repeat):
                for label in labels[r % len(labels):] + labels[: r % len(labels)]:
                    result = run_side(EngineOptions(**SIDES[label]), paths[job], lanes)
                    compute_type = result.pop("compute_type")
                    runs[label].append(result)
                    print(f"{job} lanes={lanes} {label}: {result['wall_s']} s, {result['all']}", file=sys.stderr)
            plain = runs["none"][0]["texts"]
            entry: dict = {"files": [p.name for p in paths[job]]}
            for label, results in runs.items():
                walls = [res["wall_s"] for res in results]
                entry[label] = {
                    "identical_to_none": all(res.pop("texts") == plain for res in results),
                    "wall_s_min": min(walls), "wall_s_median": round(statistics.median(walls), 2),
                    "runs": results,
                }
            base = entry["none"]["wall_s_median"]
            for label in labels:
                entry[label]["speedup_vs_none_median"] = round(base / entry[label]["wall_s_median"], 3)
            report["jobs"][f"{job}/lanes={lanes}"] = entry
    report["machine"] = machine_info(compute_type, since)
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
