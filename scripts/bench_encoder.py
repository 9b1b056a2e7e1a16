#!/usr/bin/env python
"""Does batching encoder windows pay on this machine? The spec engine's encoder on B windows at once
against B windows one by one, for streaming-sized windows (audio + the 5 s pad) and the full 30 s.

Per (window seconds, batch size): seconds per window, min and median over --repeat rounds; the
(window, batch) cases run interleaved, in a rotating order each round. Prints one JSON document with
the machine (CPU model, bf16/AMX flags, compute type).

``--packing`` adds, per window at batch 1, the engine's packed encoder (models/compute.py
pack_encoder: prepacked linears, gelu fused into fc1) against a plain copy (F.linear, then F.gelu),
interleaved in the same rounds; and torch's attention over one window's heads, on strided views of
the fused QKV output (as before) against contiguous heads (as now).

    nice python scripts/bench_encoder.py --out artifacts/bench_encoder.json
    nice python scripts/bench_encoder.py --packing --batches 1 --out artifacts/bench_encoder_packing.json

``--versus T1,T2`` adds, per window at batch 1, the encoder of each of those compute types (e.g. ``float32``
against ``int8_float32``: models/int8.py), interleaved in the same rounds.

    nice python scripts/bench_encoder.py --versus float32,int8_float32 --batches 1 \
        --out artifacts/bench_encoder_int8.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="6,10,15,30", help="encoder input seconds (default: %(default)s)")
    parser.add_argument("--batches", default="1,2,4", help="windows per encoder call (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compute-type", default="auto")
    parser.add_argument("--packing", action="store_true", help="also time packed against plain encoder layers")
    parser.add_argument("--versus", default="", help="also time these compute types' encoders, comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from specscribe.machine import cpu_times

    started = cpu_times()

    import numpy as np
    import torch

    from specscribe.clips import clips_dir
    from specscribe.machine import machine_info
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.pipeline.audio import encoder_frames, load_audio

    engine = load_transcriber(EngineOptions(engine="spec", compute_type=args.compute_type))
    audio = np.tile(load_audio(clips_dir() / "jfk.flac"), 3)  # 33 s of speech
    windows = [float(w) for w in args.windows.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    mels = {}
    for w in windows:
        frames = encoder_frames(None if w >= 30 else w, min(w, 30.0))
        mels[w] = torch.from_numpy(engine.features(audio[: int(w * 16000)])[:, :frames]).unsqueeze(0).to(engine.device)
    encoders = {"engine": engine.model.encoder}
    if args.packing:
        encoders["plain"] = copy.deepcopy(engine.model.encoder)  # PackedMLP/PackedLinear copy as plain modules
    versus = [t for t in args.versus.split(",") if t]  # compute types; the first is the ratios' numerator
    for compute_type in versus:
        other = load_transcriber(EngineOptions(engine="spec", compute_type=compute_type, draft="none"))
        encoders[compute_type] = other.model.encoder
    dtype = engine.model.encoder.conv1.weight.dtype
    cases = [(w, b, side) for w in windows for b in batches for side in encoders if side == "engine" or b == 1]
    times: dict[tuple[float, int, str], list[float]] = {c: [] for c in cases}
    with torch.inference_mode():
        for encoder in encoders.values():
            encoder(mels[windows[0]].to(encoder.conv1.weight.dtype))  # warm-up
        for r in range(args.repeat):
            for w, b, side in cases[r % len(cases):] + cases[: r % len(cases)]:
                x = mels[w].expand(b, -1, -1).contiguous().to(encoders[side].conv1.weight.dtype)  # (b, n_mels, frames)
                t0 = time.perf_counter()
                encoders[side](x)
                times[(w, b, side)].append((time.perf_counter() - t0) / b)
    rows = [{"window_s": w, "batch": b, "encoder": side, "s_per_window_min": round(min(t), 4),
             "s_per_window_median": round(statistics.median(t), 4)} for (w, b, side), t in times.items()]
    report = {"machine": machine_info(engine.compute_type, since=started), "repeat": args.repeat, "rows": rows}
    if versus:
        base = versus[0]
        report["versus"] = [{"window_s": w, **{f"{base}_over_{side}": round(statistics.median(times[(w, 1, base)])
                            / statistics.median(times[(w, 1, side)]), 3) for side in versus[1:]}}
                            for w in windows]
        print(f"versus: {report['versus']}", file=sys.stderr)
    for row in rows:
        print(f"window {row['window_s']:4.0f} s  batch {row['batch']} {row['encoder']:>6}: "
              f"{row['s_per_window_median']:.3f} s a window (min {row['s_per_window_min']:.3f})", file=sys.stderr)
    if args.packing:
        report["packing"] = [{"window_s": w, "plain_over_engine": round(
            statistics.median(times[(w, 1, "plain")]) / statistics.median(times[(w, 1, "engine")]), 3)}
            for w in windows]
        report["attention_ms"] = attention_layouts(engine, dtype, args.repeat)
        print(f"plain / engine: {report['packing']}; attention: {report['attention_ms']}", file=sys.stderr)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


def attention_layouts(engine, dtype, repeat: int) -> dict[str, float]:
    """ms per SDPA call over one 30 s window's heads (1, H, frames, Dh), median of 5 * repeat calls,
    the layouts interleaved: strided views of a fused QKV output against contiguous copies (the
    copies timed with the call, as EncoderLayer makes them)."""
    import torch
    import torch.nn.functional as F

    dims = engine.dims
    heads, frames, d = dims.n_audio_head, dims.n_audio_ctx, dims.n_audio_state
    qkv = torch.randn(1, frames, 3 * d).to(dtype)  # (1, S, 3d)
    views = [t.view(1, frames, heads, d // heads).transpose(1, 2) for t in qkv.chunk(3, dim=-1)]  # (1, H, S, Dh)
    calls = {"strided": lambda: F.scaled_dot_product_attention(*views),
             "contiguous": lambda: F.scaled_dot_product_attention(*(v.contiguous() for v in views))}
    times: dict[str, list[float]] = {name: [] for name in calls}
    with torch.inference_mode():
        for _ in range(5 * repeat + 1):
            for name, call in calls.items():
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
    return {name: round(statistics.median(t[1:]) * 1e3, 2) for name, t in times.items()}


if __name__ == "__main__":
    sys.exit(main())
