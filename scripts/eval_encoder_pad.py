"""Would a shorter encoder input change batch transcripts? Every evaluation clip, full 30 s windows against
windows of the window's audio plus PAD seconds (as streaming's --encoder-pad does).

The batched-engine issue allows encoding short inputs with a shorter window only where the text stays the
same on the evaluation clips. This decodes each clip with the default engine and options
(pipeline/longform.py), once per pad, and reports per clip whether the text equals the full-window text,
with both texts where it does not. Seconds per clip are recorded, one run each, not interleaved: not a
speed comparison.

    python scripts/eval_encoder_pad.py --pads 3,5,10 --out benchmarks/<machine>/eval_encoder_pad.json
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--pads", default="3,5,10", help="seconds of padding after each window's audio")
    args = parser.parse_args(argv)
    from specscribe.clips import evaluation_set
    from specscribe.machine import machine_info, write_report
    from specscribe.models.compute import resolve_compute_type
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio
    from specscribe.pipeline.longform import LongformOptions, transcribe_audio

    pads = [float(p) for p in args.pads.split(",")]
    transcriber = load_transcriber(EngineOptions())
    files = [path for path, _ in evaluation_set()]
    full_encode = transcriber.encode
    report_clips = {}
    for path in files:
        audio = load_audio(path)
        texts, seconds = {}, {}
        for pad in [None, *pads]:
            if pad is None:
                transcriber.encode = full_encode
            else:
                transcriber.encode = lambda a, window=None, pad=pad: full_encode(a, len(a) / SAMPLE_RATE + pad)
            started = time.perf_counter()
            result = transcribe_audio(transcriber, audio, LongformOptions())
            seconds[str(pad)] = round(time.perf_counter() - started, 2)
            texts[str(pad)] = " ".join(s.text.strip() for s in result.segments)
        transcriber.encode = full_encode
        full = texts["None"]
        report_clips[path.name] = {
            "duration_s": round(len(audio) / SAMPLE_RATE, 2),
            "seconds": seconds,
            "same_text": {str(p): texts[str(p)] == full for p in pads},
            "full_text": full,
            "changed_texts": {str(p): texts[str(p)] for p in pads if texts[str(p)] != full},
        }
        print(path.name, report_clips[path.name]["same_text"], file=sys.stderr, flush=True)
    report = {
        "machine": machine_info(resolve_compute_type("auto", "cpu")),
        "pads_s": pads,
        "clips_changed": {str(p): sum(not c["same_text"][str(p)] for c in report_clips.values()) for p in pads},
        "clips": report_clips,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
