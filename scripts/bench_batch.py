"""Batch benchmark: specscribe's pipeline vs faster-whisper's own WhisperModel.transcribe.

Same files, same decoded audio, one run, interleaved per file (the order alternates, so drift in
machine load hits both sides alike). faster-whisper runs as its users run it: int8, beam 1,
vad_filter=True, its default temperature fallback and conditioning. specscribe runs
pipeline.longform.transcribe_audio through the chosen engine (default: spec when present, else ct2).
Model loading and audio decoding are outside the timed part on both sides.

    nice -n 10 python scripts/bench_batch.py --out artifacts/bench_batch.json
    nice -n 10 python scripts/bench_batch.py --engine ct2 --workers-check --encode-batch-check

Optional checks (each its own timed section in the JSON):
  --workers-check       the whole file set through run_batch with --workers 1 vs 2
  --encode-batch-check  ct2 encoder: N windows one at a time vs one batched call
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def _default_engine() -> str:
    return "spec" if importlib.util.find_spec("specscribe.models.spec_engine") else "ct2"


def _files(clips: Path, include_physics: bool) -> list[tuple[Path, str | None]]:
    from specscribe.clips import JFK_TEXT, librivox_clips

    files: list[tuple[Path, str | None]] = [(clips / "jfk.flac", JFK_TEXT)]
    files += list(librivox_clips(clips).items())
    if include_physics:
        files.append((clips / "physicsworks.wav", None))
    return files


def bench_pair(args: argparse.Namespace) -> dict:
    from faster_whisper import WhisperModel

    from specscribe.clips import clips_dir
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.models.registry import resolve_model
    from specscribe.pipeline.audio import load_audio
    from specscribe.pipeline.longform import LongformOptions, transcribe_audio
    from specscribe.pipeline.wer import corpus_wer

    folder = resolve_model(args.model)
    t = time.perf_counter()
    ours = load_transcriber(EngineOptions(engine=args.engine, model=args.model, threads=args.threads))
    load_ours = time.perf_counter() - t
    t = time.perf_counter()
    fw = WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=args.threads)
    load_fw = time.perf_counter() - t

    files = _files(clips_dir(), not args.no_physics)
    audios = {path: load_audio(path) for path, _ in files}
    # warm-up on jfk: first calls allocate, compile and fill caches on both sides
    warm = audios[files[0][0]]
    transcribe_audio(ours, warm, LongformOptions(language="en"))
    list(fw.transcribe(warm, beam_size=1, vad_filter=True, language="en")[0])

    rows = []
    for i, (path, ref) in enumerate(files):
        audio = audios[path]
        times: dict[str, list[float]] = {"specscribe": [], "faster_whisper": []}
        texts: dict[str, str] = {}
        for rep in range(args.repeat):
            order = ("specscribe", "faster_whisper") if (i + rep) % 2 == 0 else ("faster_whisper", "specscribe")
            for side in order:
                t = time.perf_counter()
                if side == "specscribe":
                    tr = transcribe_audio(ours, audio, LongformOptions())
                    texts[side], stats = tr.text, tr.stats
                else:
                    segments, _ = fw.transcribe(audio, beam_size=1, vad_filter=True)
                    texts[side] = "".join(s.text for s in segments).strip()
                times[side].append(time.perf_counter() - t)
        row = {
            "file": path.name,
            "duration": round(len(audio) / 16000, 2),
            "specscribe_s": round(min(times["specscribe"]), 3),
            "faster_whisper_s": round(min(times["faster_whisper"]), 3),
            "reference": ref is not None,
            "specscribe_text": texts["specscribe"],
            "faster_whisper_text": texts["faster_whisper"],
            "specscribe_stats": stats.to_dict(),
        }
        row["ratio_fw_over_ours"] = round(row["faster_whisper_s"] / row["specscribe_s"], 3)
        rows.append(row)
        print(f"{path.name}: ours {row['specscribe_s']:.2f}s  fw {row['faster_whisper_s']:.2f}s", file=sys.stderr)

    total_audio = sum(r["duration"] for r in rows)
    ours_s = sum(r["specscribe_s"] for r in rows)
    fw_s = sum(r["faster_whisper_s"] for r in rows)
    scored = [(ref, r) for (_, ref), r in zip(files, rows) if ref is not None]
    return {
        "engine": args.engine,
        "model": args.model,
        "repeat": args.repeat,
        "load_s": {"specscribe": round(load_ours, 2), "faster_whisper": round(load_fw, 2)},
        "total_audio_s": round(total_audio, 2),
        "specscribe": {
            "wall_s": round(ours_s, 3),
            "x_real_time": round(total_audio / ours_s, 2),
            "wer_scored": round(corpus_wer([r for r, _ in scored], [x["specscribe_text"] for _, x in scored]), 4),
        },
        "faster_whisper": {
            "wall_s": round(fw_s, 3),
            "x_real_time": round(total_audio / fw_s, 2),
            "wer_scored": round(corpus_wer([r for r, _ in scored], [x["faster_whisper_text"] for _, x in scored]), 4),
        },
        "speedup_fw_over_ours": round(fw_s / ours_s, 3),
        "files": rows,
    }


def bench_workers(args: argparse.Namespace) -> dict:
    """The whole batch through run_batch (load included: that is what --workers changes)."""
    from specscribe.clips import clips_dir
    from specscribe.models.engines import EngineOptions
    from specscribe.pipeline.batch import BatchOptions, InputItem, run_batch

    files = _files(clips_dir(), not args.no_physics)
    items = [InputItem(str(p), p, Path(p.stem)) for p, _ in files]
    out: dict = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            options = BatchOptions(
                engine=EngineOptions(engine=args.engine, model=args.model, threads=args.threads),
                formats=("txt",), output_dir=Path(tmp), workers=workers, quiet=True,
            )
            t = time.perf_counter()
            report = run_batch(items, options)
            wall = time.perf_counter() - t
        out[f"workers_{workers}"] = {"wall_s": round(wall, 2), "done": report.done, "failed": report.failed}
        print(f"workers={workers}: {wall:.1f}s", file=sys.stderr)
    out["speedup_2_over_1"] = round(out["workers_1"]["wall_s"] / out["workers_2"]["wall_s"], 3)
    return out


def bench_encode_batch(args: argparse.Namespace, n: int = 4) -> dict:
    """ct2 encoder: n 30 s windows of physicsworks, one call each vs one batched call."""
    import ctranslate2
    import numpy as np
    from faster_whisper import WhisperModel
    from faster_whisper.audio import pad_or_trim

    from specscribe.clips import clips_dir
    from specscribe.models.registry import resolve_model
    from specscribe.pipeline.audio import load_audio

    model = WhisperModel(str(resolve_model(args.model)), device="cpu", compute_type="int8", cpu_threads=args.threads)
    audio = load_audio(clips_dir() / "physicsworks.wav")
    feats = [pad_or_trim(model.feature_extractor(audio[i * 480000 : (i + 1) * 480000])[:, :3000]) for i in range(n)]
    single = np.stack(feats)  # (n, 80, 3000)
    model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(single[:1])))  # warm-up
    seq, bat = [], []
    for _ in range(args.repeat + 1):
        t = time.perf_counter()
        for f in feats:
            model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(f[None])))
        seq.append(time.perf_counter() - t)
        t = time.perf_counter()
        model.model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(single)))
        bat.append(time.perf_counter() - t)
    return {"windows": n, "one_at_a_time_s": round(min(seq), 3), "batched_s": round(min(bat), 3),
            "speedup": round(min(seq) / min(bat), 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=_default_engine(), choices=("spec", "ct2"))
    p.add_argument("--model", default="base")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="runs per file per side; the fastest counts")
    p.add_argument("--no-physics", action="store_true", help="skip physicsworks.wav (203 s)")
    p.add_argument("--workers-check", action="store_true")
    p.add_argument("--encode-batch-check", action="store_true")
    p.add_argument("--skip-pair", action="store_true", help="only the optional checks")
    p.add_argument("--out", default=None, help="write the JSON here too")
    args = p.parse_args(argv)

    result: dict = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg_start": os.getloadavg()},
    }
    if not args.skip_pair:
        result["pair"] = bench_pair(args)
    if args.workers_check:
        result["workers"] = bench_workers(args)
    if args.encode_batch_check:
        result["encode_batch"] = bench_encode_batch(args)
    result["machine"]["load_avg_end"] = os.getloadavg()
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
