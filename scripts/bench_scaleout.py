"""Batch transcription through Ray Data against the local pipeline, process start to exit.

Sides, each its own `specscribe transcribe` process with the defaults (model load, imports and audio
decoding included, as a user meets them):
- ``local``: the plain local batch;
- ``ray1``, ``ray2``: `--ray local --workers 1` / `--workers 2` (a Ray instance started by the run,
  one or two transcriber actors, the machine's cores split between them).
Two folders: ``small`` (jfk alone, 11 s) and ``full`` (the lecture, jfk and the five LibriVox clips,
239 s in 7 files; without the lecture with ``--no-physics``, its first N files with ``--files N``). Sides and folders run interleaved in a rotating order, ``--repeat`` times.

From the medians, Ray's overhead against the local run: the fixed part (start-up, actor start and
model load, shut-down: the small folder's difference) and the marginal part of the full folder over
the small one, per file and per hour of audio. Every side's text outputs are compared byte for byte
with the local run's (``identical_text``).

    python scripts/bench_scaleout.py --out benchmarks/<machine>/bench_scaleout.json [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIDES = {"local": [], "ray1": ["--ray", "local", "--workers", "1"], "ray2": ["--ray", "local", "--workers", "2"]}


def folders(work: Path, physics: bool, limit: int = 0) -> dict[str, Path]:
    """The small folder (jfk) and the full one (the batch set, its first `limit` files if limit > 0)."""
    from specscribe.clips import batch_set, clips_dir

    small, full = work / "small", work / "full"
    small.mkdir()
    full.mkdir()
    shutil.copy(clips_dir() / "jfk.flac", small)
    chosen = batch_set(lecture=physics)
    for f, _ in chosen[:limit] if limit > 0 else chosen:
        shutil.copy(f, full)
    return {"small": small, "full": full}


def run(side: str, folder: Path, out: Path) -> float:
    cmd = [sys.executable, "-m", "specscribe", "transcribe", str(folder), "-o", str(out), "-f", "txt", "-q",
           *SIDES[side]]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    return time.perf_counter() - started


def texts(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.txt"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--ray-sides", default="ray1,ray2", help="Ray sides to run (local always runs)")
    parser.add_argument("--no-physics", action="store_true", help="leave the 203 s lecture out (smoke runs)")
    parser.add_argument("--files", type=int, default=0, metavar="N",
                        help="the full folder holds only the first N files of the set (smoke runs; 0: all)")
    args = parser.parse_args(argv)
    ray_sides = [s for s in args.ray_sides.split(",") if s]
    if not set(ray_sides) <= set(SIDES) - {"local"}:
        parser.error(f"--ray-sides: choose from {', '.join(sorted(set(SIDES) - {'local'}))}")
    from specscribe.machine import cpu_times, machine_info
    from specscribe.models.compute import resolve_compute_type
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    started = cpu_times()
    runs = [(side, name) for name in ("small", "full") for side in ["local", *ray_sides]]
    walls: dict[tuple[str, str], list[float]] = {r: [] for r in runs}
    outputs: dict[tuple[str, str], dict[str, bytes]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inputs = folders(work, not args.no_physics, args.files)
        audio = {name: sum(len(load_audio(f)) / SAMPLE_RATE for f in folder.iterdir()) for name, folder in inputs.items()}
        files = {name: len(list(folder.iterdir())) for name, folder in inputs.items()}
        for rep in range(args.repeat):
            order = runs[rep % len(runs) :] + runs[: rep % len(runs)]
            for side, name in order:
                out = work / f"out-{rep}-{side}-{name}"
                walls[(side, name)].append(run(side, inputs[name], out))
                outputs[(side, name)] = texts(out)
                print(f"repeat {rep} {side:5s} {name:5s} {walls[(side, name)][-1]:7.2f} s", file=sys.stderr)

    median = {r: statistics.median(w) for r, w in walls.items()}
    sides = {}
    for side, name in runs:
        sides[f"{side}_{name}"] = {
            "wall_s_median": round(median[(side, name)], 3),
            "wall_s_all": [round(w, 3) for w in walls[(side, name)]],
            "x_real_time": round(audio[name] / median[(side, name)], 2),
            "identical_text": outputs[(side, name)] == outputs[("local", name)],
        }
    overhead = {}
    extra_files = files["full"] - files["small"]
    extra_hours = (audio["full"] - audio["small"]) / 3600
    for side in ray_sides:
        fixed = median[(side, "small")] - median[("local", "small")]
        marginal = (median[(side, "full")] - median[("local", "full")]) - fixed
        overhead[side] = {
            "fixed_s": round(fixed, 3),
            "marginal_s": round(marginal, 3),
            "marginal_s_per_file": round(marginal / extra_files, 3),
            "marginal_s_per_audio_hour": round(marginal / extra_hours, 1),
            "full_folder_ratio_to_local": round(median[(side, "full")] / median[("local", "full")], 3),
        }
    report = {
        "machine": machine_info(resolve_compute_type("auto", "cpu"), since=started),
        "repeat": args.repeat,
        "folders": {name: {"files": files[name], "audio_s": round(audio[name], 2)} for name in inputs},
        "sides": sides,
        "ray_overhead": overhead,
    }
    from specscribe.machine import write_report

    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
