"""Does a compute type change what batch transcription writes? Every evaluation clip, once per side.

Sides are spec-engine compute types (``float32``, ``int8_float32``, ...) or ``ct2`` (faster-whisper's
CTranslate2 engine in the same pipeline, int8 on CPU, for reference). Each clip is decoded with the default
options (language detected, pipeline/longform.py), and the report gives per side and clip: the text, the
language and its probability, the WER against the clip's reference where it has one (jfk, LibriVox, the
conversations), and the word difference from the first side's text. Seconds are recorded, one run each,
not interleaved: not a speed comparison (scripts/bench_batch.py is one).

    python scripts/eval_compute_types.py --sides float32,int8_float32,ct2 \
        --out benchmarks/<machine>/eval_compute_types.json
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--sides", default="float32,int8_float32,ct2",
                        help="compute types, or ct2 (default: %(default)s)")
    parser.add_argument("--clips", default="", help="only clips whose file name contains one of these, comma-separated")
    args = parser.parse_args(argv)
    from specscribe.clips import evaluation_set
    from specscribe.machine import machine_info, write_report
    from specscribe.models.compute import resolve_compute_type
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.pipeline.audio import load_audio
    from specscribe.pipeline.longform import transcribe_audio
    from specscribe.pipeline.wer import corpus_wer, wer

    sides = args.sides.split(",")
    wanted = [w for w in args.clips.split(",") if w]
    clips = [(p, ref) for p, ref in evaluation_set() if not wanted or any(w in p.name for w in wanted)]
    audio = {path: load_audio(path) for path, _ in clips}
    per_clip: dict[str, dict] = {path.name: {"reference": ref, "sides": {}} for path, ref in clips}
    for side in sides:
        options = EngineOptions(engine="ct2") if side == "ct2" else EngineOptions(engine="spec", compute_type=side)
        transcriber = load_transcriber(options)
        for path, ref in clips:
            started = time.perf_counter()
            result = transcribe_audio(transcriber, audio[path])
            text = " ".join(s.text.strip() for s in result.segments)
            row = {"seconds": round(time.perf_counter() - started, 2), "language": result.language,
                   "language_probability": round(result.language_probability, 3), "text": text}
            if ref is not None:
                row["wer"] = round(wer(ref, text), 4)
            first = per_clip[path.name]["sides"].get(sides[0])
            if first is not None:
                row["same_text_as_" + sides[0]] = text == first["text"]
                row["wer_against_" + sides[0]] = round(wer(first["text"], text), 4)
            per_clip[path.name]["sides"][side] = row
            print(f"{side:>13} {path.name}: {row.get('wer', '-')} {row['language']} {row['seconds']} s",
                  file=sys.stderr)
        del transcriber
    summary = {}
    for side in sides:
        scored = [(c["reference"], c["sides"][side]["text"]) for c in per_clip.values() if c["reference"] is not None]
        rows = [c["sides"][side] for c in per_clip.values()]
        summary[side] = {
            "corpus_wer_scored_clips": round(corpus_wer(*zip(*scored)), 4) if scored else None,
            "scored_clips": len(scored),
        }
        if side != sides[0]:
            summary[side]["clips_with_the_same_text_as_" + sides[0]] = sum(r["same_text_as_" + sides[0]] for r in rows)
            against = [r["wer_against_" + sides[0]] for r in rows]
            summary[side]["mean_wer_against_" + sides[0]] = round(sum(against) / len(against), 4)
    report = {"machine": machine_info(resolve_compute_type("auto", "cpu")), "sides": sides,
              "clips_total": len(clips), "summary": summary, "clips": per_clip}
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
