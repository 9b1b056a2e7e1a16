"""Does decoding the rest of a window that Whisper ended early recover words, and at what cost?

Whisper often ends a window early when a clause ends within a second or two of the window's end
(pipeline/longform.py ``_remainder``): those words are lost unless the rest is decoded again. This
transcribes the long evaluation recordings with the default engine, once per value of
``LongformOptions.min_remainder_speech`` (seconds of VAD speech left after the last segment that
trigger the re-decode), in the layout ``specscribe transcribe`` uses for one file (one lane per
window at the default batch size), and reports per clip: WER against the reference where there is
one, word agreement with faster-whisper's own transcript (int8, beam 1, VAD) where there is none,
the number of decodes and the seconds. Settings alternate clip by clip, one run each: the seconds
are a rough cost, not a speed comparison (scripts/bench_batch.py is).

    python scripts/eval_remainder.py --values 3,1 --out benchmarks/<machine>/eval_remainder.json
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--values", default="3,1", help="min_remainder_speech values (seconds)")
    parser.add_argument("--lanes", type=int, default=16, help="lanes per file (the CLI's default batch size)")
    args = parser.parse_args(argv)
    from faster_whisper import WhisperModel

    from specscribe.clips import clips_dir
    from specscribe.conversations import conversation_clips
    from specscribe.machine import machine_info, write_report
    from specscribe.models.compute import resolve_compute_type
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.models.registry import resolve_model
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio
    from specscribe.pipeline.longform import LongformOptions, transcribe_audio
    from specscribe.pipeline.wer import wer

    values = [float(v) for v in args.values.split(",")]
    transcriber = load_transcriber(EngineOptions())
    clips = clips_dir()
    files: list[tuple[str, object, str | None]] = [
        (name, wav, ref) for name, (wav, ref) in conversation_clips(clips).items()
    ]
    files += [("multilingual", clips / "multilingual.mp3", None), ("physicsworks", clips / "physicsworks.wav", None)]
    fw = WhisperModel(str(resolve_model("base")), device="cpu", compute_type="int8", cpu_threads=2)
    report_clips = {}
    for n, (name, path, reference) in enumerate(files):
        audio = load_audio(path)
        order = values if n % 2 == 0 else values[::-1]
        entry: dict = {"duration_s": round(len(audio) / SAMPLE_RATE, 2), "by_value": {}}
        if reference is None:
            segments, _ = fw.transcribe(audio, beam_size=1, vad_filter=True, language="en" if name != "multilingual" else None)
            reference = " ".join(s.text.strip() for s in segments)
            entry["reference"] = "faster-whisper int8 transcript (agreement, not accuracy)"
        else:
            entry["reference"] = "dialogue script"
        for value in order:
            started = time.perf_counter()
            tr = transcribe_audio(transcriber, audio, LongformOptions(min_remainder_speech=value), lanes=args.lanes)
            text = tr.text
            entry["by_value"][str(value)] = {
                "seconds": round(time.perf_counter() - started, 2),
                "decodes": len(tr.windows),
                "words": len(text.split()),
                "wer_pct": round(100 * wer(reference, text), 2),
                "text": text,
            }
        report_clips[name] = entry
        print(name, {v: (e["wer_pct"], e["decodes"]) for v, e in entry["by_value"].items()}, file=sys.stderr, flush=True)
    report = {
        "machine": machine_info(resolve_compute_type("auto", "cpu")),
        "values_s": values,
        "lanes": args.lanes,
        "mean_wer_pct": {
            str(v): round(sum(c["by_value"][str(v)]["wer_pct"] for c in report_clips.values()) / len(report_clips), 2)
            for v in values
        },
        "clips": report_clips,
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
