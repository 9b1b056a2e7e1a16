"""Online draft adaptation (--adapt-draft) against the same engine without it, side by side. JSON out.

    python scripts/bench_adapt.py [--lanes 1] [--repeat 1] [--out bench.json]

Two jobs, as `specscribe transcribe` runs them (pipeline/longform.py transcribe_audio, the draft
adapter draining between windows as in batch): the 203 s lecture (physicsworks), and a folder of
recordings (the five LibriVox clips, jfk, hotwords, stereo_diarization) decoded one after another
by one engine, so the adapter carries over between files. For each job and side it records every
finished decode in order and reports acceptance and tokens per target pass over the first third
and the last third of the decodes, wall time, the adapter's counters (labels, steps, checks,
swaps, ms per unit, the longest unit: what a live caption could wait), and whether the text is
identical. Sides alternate per repeat (off, on, on, off, ...); each side loads a fresh engine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

FOLDER = ["librivox/0870", "librivox/0880", "librivox/0890", "librivox/0920", "librivox/0930", "jfk",
          "hotwords", "stereo_diarization"]


def clip_paths() -> dict[str, list[Path]]:
    from specscribe.clips import clips_dir

    root = clips_dir()
    found = {p.relative_to(root).with_suffix("").as_posix(): p for p in sorted(root.rglob("*.*")) if p.is_file()}
    folder = []
    for name in FOLDER:  # "librivox/0870": the LibriVox file whose name ends in 0870
        folder_name, _, stem = name.rpartition("/")
        folder.append(next(p for key, p in found.items() if key.startswith(folder_name) and key.endswith(stem)))
    return {"lecture": [found["physicsworks"]], "folder": folder}


def thirds(decodes: list) -> dict:
    n = len(decodes)
    cut = max(1, n // 3)

    def figures(part):
        drafted = sum(s.drafted for s in part)
        return {"decodes": len(part), "drafted": drafted,
                "acceptance": round(sum(s.accepted for s in part) / drafted, 4) if drafted else None,
                "tokens_per_pass": round(sum(s.tokens for s in part) / max(1, sum(s.target_passes for s in part)), 3)}

    return {"first_third": figures(decodes[:cut]), "last_third": figures(decodes[n - cut:]), "all": figures(decodes)}


def run_side(options, files: list[Path], lanes: int) -> dict:
    """One job (files one after another) on a fresh engine of ``options`` (EngineOptions)."""
    from faster_whisper.audio import decode_audio

    from specscribe.models.engines import load_transcriber
    from specscribe.pipeline.longform import transcribe_audio

    started = time.perf_counter()
    engine = load_transcriber(options)
    decodes = []
    finish = engine.finish_decode

    def recording(job, res):  # instrumentation only: the decode's own counters, in finishing order
        decodes.append(res.stats)
        return finish(job, res)

    engine.finish_decode = recording
    texts = []
    for path in files:
        audio = decode_audio(str(path), sampling_rate=16000)
        texts.append(" ".join(s.text.strip() for s in transcribe_audio(engine, audio, lanes=lanes).segments))
    out = {"wall_s": round(time.perf_counter() - started, 2), "texts": texts} | thirds(decodes)
    if engine.adapter is not None:
        stats = engine.adapter.stats.to_dict()
        for unit, count in (("label_ms", stats["labelled"]), ("step_ms", stats["steps"]), ("check_ms", stats["checks"])):
            stats[unit.replace("_ms", "_ms_each")] = round(stats[unit] / count, 1) if count else None
        out["adapter"] = stats
    if engine.policy is not None:
        out["policy"] = engine.policy.summary()
    out["compute_type"] = engine.compute_type
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-")
    parser.add_argument("--lanes", type=int, default=1, help="lanes per file (1: windows in order, as --batch-size 1)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--jobs", default="lecture,folder")
    args = parser.parse_args(argv)
    from specscribe.machine import cpu_times, machine_info, write_report
    from specscribe.models.engines import EngineOptions

    since = cpu_times()
    paths = clip_paths()
    report: dict = {"lanes": args.lanes, "jobs": {}}
    compute_type = None
    for job in args.jobs.split(","):
        runs: dict[str, list] = {"off": [], "on": []}
        for r in range(args.repeat):
            for side in (("off", "on") if r % 2 == 0 else ("on", "off")):
                result = run_side(EngineOptions(adapt_draft=side == "on"), paths[job], args.lanes)
                compute_type = result.pop("compute_type")
                runs[side].append(result)
                print(f"{job} {side}: {result['wall_s']} s, last third {result['last_third']}", file=sys.stderr)
        identical = all(a["texts"] == b["texts"] for a in runs["off"] for b in runs["on"])
        for side in runs.values():
            for result in side:
                result.pop("texts")
        report["jobs"][job] = {"files": [p.name for p in paths[job]], "identical_text": identical} | runs
    report["machine"] = machine_info(compute_type, since)
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
