"""Wall time of the `spec` torch engine (target only) against faster-whisper/CTranslate2, side by side.

Both engines run in one process on the same clips, interleaved (spec, ct2, ct2, spec, ...), each
doing a whole window: features, encoder, language detection, greedy decode with timestamps.
ct2 is faster-whisper's own path (WhisperModel.encode + model.generate, int8, beam 1, max_length
448). Writes JSON: per-clip times and ratio, peak memory, and where the spec time goes.

    python scripts/bench_engines.py --out bench.json [--repeat 2] [--spec-compute auto] [--threads 0]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_clips() -> dict:
    """The eight evaluation windows (specscribe.clips) plus the lecture's first 30 s."""
    from specscribe.clips import clips_dir, evaluation_windows
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    clips = evaluation_windows()
    clips["physicsworks-30s"] = load_audio(clips_dir() / "physicsworks.wav")[: 30 * SAMPLE_RATE]
    return clips


class ForwardTimer:
    """Wraps DecoderSession.forward to split decoder time into prompt passes and 1-token steps."""

    def __init__(self):
        from specscribe.models import whisper

        self.prefill_ms = self.steps_ms = 0.0
        self.n_steps = 0
        original = whisper.DecoderSession.forward
        timer = self

        def timed(session, tokens, return_cross_attention=False):
            started = time.perf_counter()
            out = original(session, tokens, return_cross_attention)
            ms = (time.perf_counter() - started) * 1000
            if len(tokens) == 1 and session.length > 1:
                timer.steps_ms += ms
                timer.n_steps += 1
            elif session.length > 1:  # the prompt pass (the 1-token language pass is timed apart)
                timer.prefill_ms += ms
            return out

        whisper.DecoderSession.forward = timed

    def snapshot(self) -> tuple[float, float, int]:
        return self.prefill_ms, self.steps_ms, self.n_steps


def run_spec(engine, timer: ForwardTimer, audio) -> dict:
    from specscribe.models.types import DecodeRequest

    t0 = dict(vars(engine.times))
    f0 = timer.snapshot()
    started = time.perf_counter()
    encoded = engine.encode(audio)
    result = engine.decode(encoded, DecodeRequest(language=None, timestamps=True))
    wall = (time.perf_counter() - started) * 1000
    t1, f1 = vars(engine.times), timer.snapshot()
    d = {k: t1[k] - t0[k] for k in ("features", "encoder", "cross_kv", "language", "decode_total")}
    prefill, steps, n_steps = (f1[i] - f0[i] for i in range(3))
    return {
        "wall_ms": round(wall, 1),
        "tokens": list(result.tokens),
        "text": result.text,
        "language": result.language,
        "breakdown_ms": {
            "features": round(d["features"], 1),
            "encoder": round(d["encoder"], 1),
            "cross_kv": round(d["cross_kv"], 1),
            "language_detection": round(d["language"], 1),
            "prompt_pass": round(prefill, 1),
            "decoder_steps": round(steps, 1),
            "n_steps": n_steps,
            "ms_per_step": round(steps / n_steps, 2) if n_steps else None,
            "rules_and_overhead": round(d["decode_total"] - (prefill + steps), 1),
        },
    }


def run_ct2(fw, audio) -> dict:
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    started = time.perf_counter()
    feats = fw.feature_extractor(audio)
    mel = pad_or_trim(feats[:, : min(feats.shape[-1] - 1, 3000)])
    t_feat = time.perf_counter()
    out = fw.encode(mel)
    t_enc = time.perf_counter()
    language = fw.model.detect_language(out)[0][0][0][2:-2]
    t_lang = time.perf_counter()
    tok = Tokenizer(fw.hf_tokenizer, fw.model.is_multilingual, task="transcribe", language=language)
    prompt = fw.get_prompt(tok, [], without_timestamps=False)
    res = fw.model.generate(
        out, [prompt], beam_size=1, max_length=448, return_scores=True, return_no_speech_prob=True,
        suppress_blank=True, suppress_tokens=list(get_suppressed_tokens(tok, [-1])), max_initial_timestamp_index=50,
    )[0]
    done = time.perf_counter()
    tokens = res.sequences_ids[0]
    return {
        "wall_ms": round((done - started) * 1000, 1),
        "tokens": list(tokens),
        "text": tok.decode(tokens),
        "language": language,
        "breakdown_ms": {
            "features": round((t_feat - started) * 1000, 1),
            "encoder": round((t_enc - t_feat) * 1000, 1),
            "language_detection": round((t_lang - t_enc) * 1000, 1),
            "generate": round((done - t_lang) * 1000, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="base")
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds over all clips")
    parser.add_argument("--spec-compute", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="threads for both engines (0: library default)")
    parser.add_argument("--clips", default="", help="comma-separated subset of clip names")
    args = parser.parse_args(argv)

    import torch
    from faster_whisper import WhisperModel

    from specscribe.models.engines import EngineOptions
    from specscribe.models.registry import resolve_model
    from specscribe.models.spec_engine import SpecEngine

    folder = resolve_model(args.model)
    clips = load_clips()
    if args.clips:
        clips = {k: v for k, v in clips.items() if k in args.clips.split(",")}
    rss0 = rss_mb()
    t = time.perf_counter()
    spec = SpecEngine(folder, EngineOptions(engine="spec", model=args.model, compute_type=args.spec_compute, threads=args.threads))
    spec_load_s, rss1 = time.perf_counter() - t, rss_mb()
    t = time.perf_counter()
    fw = WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=args.threads)
    ct2_load_s, rss2 = time.perf_counter() - t, rss_mb()
    timer = ForwardTimer()

    first = next(iter(clips.values()))  # warm-up, not timed
    run_spec(spec, timer, first)
    run_ct2(fw, first)

    runs: dict[str, dict[str, list]] = {name: {"spec": [], "ct2": []} for name in clips}
    for rep in range(args.repeat):
        for i, (name, audio) in enumerate(clips.items()):
            order = ("spec", "ct2") if (rep + i) % 2 == 0 else ("ct2", "spec")
            for engine in order:
                r = run_spec(spec, timer, audio) if engine == "spec" else run_ct2(fw, audio)
                runs[name][engine].append(r)
                print(f"{name:18s} {engine:4s} {r['wall_ms']:9.1f} ms", file=sys.stderr)

    per_clip = {}
    for name, audio in clips.items():
        s = statistics.median(r["wall_ms"] for r in runs[name]["spec"])
        c = statistics.median(r["wall_ms"] for r in runs[name]["ct2"])
        last_s, last_c = runs[name]["spec"][-1], runs[name]["ct2"][-1]
        per_clip[name] = {
            "audio_s": round(len(audio) / 16000, 2),
            "spec_ms": s,
            "ct2_ms": c,
            "ratio_spec_over_ct2": round(s / c, 3),
            "spec_tokens": len(last_s["tokens"]),
            "ct2_tokens": len(last_c["tokens"]),
            "same_tokens": last_s["tokens"] == last_c["tokens"],
            "spec_breakdown_ms": last_s["breakdown_ms"],
            "ct2_breakdown_ms": last_c["breakdown_ms"],
        }
    total_s = sum(v["spec_ms"] for v in per_clip.values())
    total_c = sum(v["ct2_ms"] for v in per_clip.values())
    keys = ("features", "encoder", "cross_kv", "language_detection", "prompt_pass", "decoder_steps", "rules_and_overhead")
    spec_total_breakdown = {k: round(sum(v["spec_breakdown_ms"][k] for v in per_clip.values()), 1) for k in keys}
    steps = sum(v["spec_breakdown_ms"]["n_steps"] for v in per_clip.values())
    report = {
        "model": args.model,
        "spec_compute_type": spec.compute_type,
        "ct2_compute_type": "int8",
        "torch_threads": torch.get_num_threads(),
        "threads_option": args.threads,
        "repeat": args.repeat,
        "load_s": {"spec": round(spec_load_s, 2), "ct2": round(ct2_load_s, 2)},
        "rss_mb": {"before": round(rss0), "after_spec_load": round(rss1), "after_ct2_load": round(rss2), "peak": round(peak_rss_mb())},
        "total_ms": {"spec": round(total_s, 1), "ct2": round(total_c, 1), "ratio_spec_over_ct2": round(total_s / total_c, 3)},
        "spec_breakdown_total_ms": spec_total_breakdown,
        "spec_ms_per_decoder_step": round(spec_total_breakdown["decoder_steps"] / steps, 2) if steps else None,
        "clips": per_clip,
    }
    text = json.dumps(report, indent=2)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
