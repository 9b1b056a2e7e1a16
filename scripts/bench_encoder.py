#!/usr/bin/env python
"""Does batching encoder windows pay on this machine? The spec engine's encoder on B windows at once
against B windows one by one, for streaming-sized windows (audio + the 5 s pad) and the full 30 s.

Per (window seconds, batch size): seconds per window, min and median over --repeat rounds; the
(window, batch) cases run interleaved, in a rotating order each round. Prints one JSON document with
the machine (CPU model, bf16/AMX flags, compute type).

    nice python scripts/bench_encoder.py --out artifacts/bench_encoder.json
"""

from __future__ import annotations

import argparse
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
    cases = [(w, b) for w in windows for b in batches]
    times: dict[tuple[float, int], list[float]] = {c: [] for c in cases}
    with torch.inference_mode():
        engine.model.encode(mels[windows[0]])  # warm-up
        for r in range(args.repeat):
            for w, b in cases[r % len(cases):] + cases[: r % len(cases)]:
                x = mels[w].expand(b, -1, -1).contiguous()  # (b, n_mels, frames)
                t0 = time.perf_counter()
                engine.model.encode(x)
                times[(w, b)].append((time.perf_counter() - t0) / b)
    rows = [{"window_s": w, "batch": b, "s_per_window_min": round(min(t), 4),
             "s_per_window_median": round(statistics.median(t), 4)} for (w, b), t in times.items()]
    report = {"machine": machine_info(engine.compute_type, since=started), "repeat": args.repeat, "rows": rows}
    for row in rows:
        print(f"window {row['window_s']:4.0f} s  batch {row['batch']}: {row['s_per_window_median']:.3f} s a window "
              f"(min {row['s_per_window_min']:.3f})", file=sys.stderr)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
