"""Word alignment per window: what one `align_words` call costs, and how much of it is the pass.

Every streaming update and every batch window with word timestamps runs one alignment after its decode
(models/alignment.py): a teacher-forced target pass that returns cross-attention logits, then the median
filter and dynamic time warping on the CPU. This times the whole call and, inside it, `median_filter` and
`dtw` (wrapped with a timer), on windows of real speech the size a live update sees: the lecture cut at
--seconds (each window's audio plus --encoder-pad seconds of encoder input, as `live` encodes it), and the
evaluation clips (jfk, LibriVox). Each window is encoded and decoded once, untimed; then --repeat rounds
align every window once each, after one untimed round. Median ms per window over the rounds.

To compare two trees, run this script once with each tree's python (PYTHONPATH pointing at the other
checkout), alternately: each run's JSON records the machine and the compute type.

    python scripts/bench_align.py [--seconds 4,8,12] [--repeat 5] [--out artifacts/bench_align.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def windows(seconds: list[float]) -> dict:
    """{name: audio}: lecture windows of each length (three starts each), then the evaluation clips."""
    from specscribe.clips import clips_dir, evaluation_windows
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    lecture = load_audio(clips_dir() / "physicsworks.wav")
    out = {}
    for length in seconds:
        for start in (20, 80, 140):
            out[f"physicsworks@{start}s+{length:g}s"] = lecture[start * SAMPLE_RATE : int((start + length) * SAMPLE_RATE)]
    pool = evaluation_windows()
    out.update({name: audio for name, audio in pool.items() if name == "jfk" or name.isdigit()})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="base")
    p.add_argument("--seconds", default="4,8,12", help="lecture window lengths (comma list)")
    p.add_argument("--encoder-pad", type=float, default=5.0, help="seconds of encoder input past the audio")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default="artifacts/bench_align.json")
    args = p.parse_args(argv)

    import specscribe.models.alignment as alignment
    from specscribe.machine import cpu_times, machine_info, write_report
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.models.types import DecodeRequest

    started = cpu_times()
    engine = load_transcriber(EngineOptions(model=args.model))
    spent = {"dtw": 0.0, "median_filter": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t

        return wrapper

    alignment.dtw = timed("dtw", alignment.dtw)
    alignment.median_filter = timed("median_filter", alignment.median_filter)
    decoded = {}
    for name, audio in windows([float(s) for s in args.seconds.split(",")]).items():
        window = min(30.0, len(audio) / 16000 + args.encoder_pad)
        encoded = engine.encode(audio, None if window >= 30.0 else window)
        result = engine.decode(encoded, DecodeRequest(language="en"))
        decoded[name] = (encoded, result)
        print(f"{name}: {len(result.tokens)} tokens", file=sys.stderr)
    per = {name: {"total": [], "dtw": [], "median_filter": []} for name in decoded}
    for round_ in range(args.repeat + 1):
        for name, (encoded, result) in decoded.items():
            spent.update(dtw=0.0, median_filter=0.0)
            t = time.perf_counter()
            engine.align_words(encoded, result)
            total = time.perf_counter() - t
            if round_:  # the first round is untimed
                for key, value in (("total", total), *spent.items()):
                    per[name][key].append(value * 1000)
    rows = {
        name: {"tokens": len(decoded[name][1].tokens),
               **{key: round(statistics.median(values), 3) for key, values in times.items()}}
        for name, times in per.items()
    }
    medians = {key: round(statistics.median(r[key] for r in rows.values()), 3) for key in ("total", "dtw", "median_filter")}
    report = {
        "machine": machine_info(engine.compute_type, started),
        "args": vars(args),
        "ms_per_window_median": medians,
        "post_share": round((medians["dtw"] + medians["median_filter"]) / medians["total"], 3),
        "windows": rows,
    }
    write_report(report, args.out)
    print(f"align ms per window (median): {medians}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
