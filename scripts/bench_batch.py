"""Batch transcription, process start to exit: specscribe against faster-whisper's two modes.

Every side runs as its own process over the same files, so model load, imports and audio
decoding are included on every side, as a user meets them:
- ``specscribe``: `specscribe transcribe FILES -f json` with its defaults (spec engine, auto
  compute type, auto drafts), at each ``--batch-sizes`` (the first is the default's);
- ``fw_transcribe``: faster-whisper ``WhisperModel.transcribe`` (int8, beam 1, vad_filter=True,
  its default temperature fallback and conditioning);
- ``fw_batched``: faster-whisper ``BatchedInferencePipeline.transcribe`` (int8, batch 8, beam 1
  like ours; ``--fw-beam`` changes it; its own default is 5);
- with ``--variant NAME=ARGS``: ``specscribe_b{default}_NAME``, the default side with extra
  transcribe arguments (an engine setting timed against the default in the same run);
- with ``--beam N``: ``specscribe_b{default}_beamN`` (`--beam-size N`) and ``fw_transcribe_beamN``
  (faster-whisper's default mode: beam 5), beam search against beam search;
- with ``--base PYTHON``: ``base``, the default side run by another checkout's python (the tree before a
  change, e.g. a worktree's), from outside this checkout so that its own ``specscribe`` is imported.
With ``--device cuda`` the specscribe sides run the spec engine on the GPU; ``--no-fw`` leaves
faster-whisper's sides out (a machine without CTranslate2's CUDA libraries): the lecture is then
compared with the default side's text.
Sides run interleaved in a rotating order, ``--repeat`` times; the JSON has min and median wall
seconds per side, the ratio of the faster faster-whisper side to specscribe's default, and
WER on the files that have references (jfk and the LibriVox clips), plus each side's
disagreement with fw_transcribe on the lecture (physicsworks, no reference).

    python scripts/bench_batch.py --out artifacts/bench_batch.json [--repeat 3] [--batch-sizes 8,1,4,16]
        [--no-physics] [--files N] [--no-fw] [--beam N] [--variant NAME=ARGS]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FW_SCRIPT = r"""
import json, sys
from faster_whisper import BatchedInferencePipeline, WhisperModel
folder, mode, beam, out, *files = sys.argv[1:]
model = WhisperModel(folder, device="cpu", compute_type="int8")
texts = {}
for f in files:
    if mode == "batched":
        segments, _ = BatchedInferencePipeline(model).transcribe(f, batch_size=8, beam_size=int(beam))
    else:
        segments, _ = model.transcribe(f, beam_size=int(beam), vad_filter=True)
    texts[f] = "".join(s.text for s in segments).strip()
json.dump(texts, open(out, "w"))
"""


def run_side(side: str, files: list[Path], args: argparse.Namespace, work: Path) -> tuple[float, dict[str, str]]:
    """Run one side as a process; returns (wall seconds, {file: text})."""
    out = work / side
    out.mkdir(parents=True, exist_ok=True)
    side_name, _, beam_part = side.partition("_beam")
    cwd = None
    if side.startswith("specscribe") or side == "base":
        size, _, variant = side_name.removeprefix("specscribe_b").partition("_")
        python = sys.executable
        if side == "base":
            python, size, variant, cwd = args.base, args.batch_sizes.split(",")[0], "", tempfile.gettempdir()
        cmd = [python, "-m", "specscribe", "transcribe", *map(str, files), "-f", "json", "-o", str(out),
               "-q", "--batch-size", size, "--beam-size", beam_part or "1", "--device", args.device,
               *args.variants.get(variant, ())]
    else:
        from specscribe.models.registry import resolve_model

        mode = "batched" if side == "fw_batched" else "sequential"
        beam = str(args.fw_beam if mode == "batched" else beam_part or 1)
        cmd = [sys.executable, "-c", FW_SCRIPT, str(resolve_model(args.model)), mode, beam, str(out / "texts.json"),
               *map(str, files)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600, cwd=cwd)
    wall = time.perf_counter() - started
    if side.startswith("specscribe") or side == "base":
        texts = {str(f): json.loads((out / f"{f.stem}.json").read_text())["text"] for f in files}
    else:
        texts = json.loads((out / "texts.json").read_text())
    return wall, texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--model", default="base")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-sizes", default="8,1,4,16", help="specscribe --batch-size values; the first is the default")
    parser.add_argument("--fw-beam", type=int, default=1, help="beam size of fw_batched (faster-whisper's default: 5)")
    parser.add_argument("--no-physics", action="store_true", help="skip the 203 s lecture (smoke runs)")
    parser.add_argument("--files", type=int, default=0, metavar="N", help="only the first N files of the set "
                        "(smoke runs; default: all)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where specscribe's sides run")
    parser.add_argument("--no-fw", action="store_true", help="leave faster-whisper's sides out")
    parser.add_argument("--beam", type=int, default=0,
                        help="also beam search at this width: specscribe's default batch size and fw transcribe")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="also specscribe at the default batch size with these extra transcribe arguments, "
                        "side specscribe_b{size}_NAME (e.g. 'qb4=--pass-rows 8 --query-block 4'); repeatable")
    parser.add_argument("--base", metavar="PYTHON", help="also side base: the default side run by this python "
                        "(another checkout's, e.g. the tree before a change)")
    args = parser.parse_args(argv)
    args.variants = {}
    for item in args.variant:
        name, sep, extra = item.partition("=")
        if not sep or not name.isidentifier() or "_" in name:
            parser.error(f"--variant {item!r}: NAME=ARGS, NAME letters and digits")
        args.variants[name] = extra.split()
    from specscribe.machine import cpu_times

    started = cpu_times()

    from specscribe.machine import machine_info
    from specscribe.models.compute import resolve_compute_type
    from specscribe.pipeline.wer import corpus_wer, wer

    from specscribe.clips import batch_set

    files = batch_set(lecture=not args.no_physics)[: args.files or None]
    paths = [f for f, _ in files]
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    sides = [f"specscribe_b{s}" for s in sizes] + [f"specscribe_b{sizes[0]}_{v}" for v in args.variants]
    sides += ["base"] if args.base else []
    sides += [] if args.no_fw else ["fw_transcribe", "fw_batched"]
    if args.beam > 1:
        sides += [f"specscribe_b{sizes[0]}_beam{args.beam}"] + ([] if args.no_fw else [f"fw_transcribe_beam{args.beam}"])
    walls: dict[str, list[float]] = {s: [] for s in sides}
    texts: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
            for side in order:
                wall, texts[side] = run_side(side, paths, args, Path(tmp) / f"{rep}")
                walls[side].append(wall)
                print(f"repeat {rep} {side:18s} {wall:7.2f} s", file=sys.stderr)

    scored = [(str(f), ref) for f, ref in files if ref is not None]
    lecture = [str(f) for f, ref in files if ref is None]
    audio_s = sum(_duration(f) for f in paths)
    default = f"specscribe_b{sizes[0]}"
    lecture_ref = default if args.no_fw else "fw_transcribe"
    report_sides = {}
    for side in sides:
        entry = {
            "wall_s_min": round(min(walls[side]), 3),
            "wall_s_median": round(statistics.median(walls[side]), 3),
            "wall_s_all": [round(w, 3) for w in walls[side]],
            "x_real_time": round(audio_s / statistics.median(walls[side]), 2),
            "wer_scored": round(corpus_wer([r for _, r in scored], [texts[side][f] for f, _ in scored]), 4),
        }
        if lecture:
            entry[f"lecture_wer_vs_{lecture_ref}"] = round(wer(texts[lecture_ref][lecture[0]], texts[side][lecture[0]]), 4)
        report_sides[side] = entry
    report = {
        "machine": machine_info(resolve_compute_type("auto", args.device), since=started),
        "device": args.device,
        "model": args.model,
        "repeat": args.repeat,
        "fw_batched_beam": args.fw_beam,
        "variants": {f"specscribe_b{sizes[0]}_{v}": extra for v, extra in args.variants.items()},
        "files": [{"file": f.name, "duration_s": round(_duration(f), 2), "reference": ref is not None} for f, ref in files],
        "audio_s": round(audio_s, 2),
        "sides": report_sides,
        "default": default,
        "texts": texts,
    }
    if not args.no_fw:
        fastest_fw = min(("fw_transcribe", "fw_batched"), key=lambda s: report_sides[s]["wall_s_median"])
        report["fastest_faster_whisper"] = fastest_fw
        report["speedup_default_over_fastest_fw"] = round(
            report_sides[fastest_fw]["wall_s_median"] / report_sides[default]["wall_s_median"], 3
        )
        report["wer_points_default_minus_fw_transcribe"] = round(
            100 * (report_sides[default]["wer_scored"] - report_sides["fw_transcribe"]["wer_scored"]), 2
        )
    if args.beam > 1:  # beam search against beam search
        ours = f"{default}_beam{args.beam}"
        report["beam"] = {
            "width": args.beam,
            "slowdown_over_greedy": round(report_sides[ours]["wall_s_median"] / report_sides[default]["wall_s_median"], 3),
        }
        if not args.no_fw:
            theirs = f"fw_transcribe_beam{args.beam}"
            report["beam"]["speedup_over_fw_transcribe"] = round(
                report_sides[theirs]["wall_s_median"] / report_sides[ours]["wall_s_median"], 3
            )
    from specscribe.machine import write_report

    write_report(report, args.out)
    return 0


def _duration(path: Path) -> float:
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    return len(load_audio(path)) / SAMPLE_RATE


if __name__ == "__main__":
    sys.exit(main())
