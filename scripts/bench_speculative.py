"""Benchmark speculative decoding against plain target decoding, side by side in one run. JSON out.

    python scripts/bench_speculative.py [--compute-type auto] [--repeat 3] [--out bench.json]

For each real clip (the parity test's: jfk, five LibriVox clips, both halves of multilingual.mp3),
encoded once, every drafter decodes the same window (transcribe, timestamps on):
- none: the speculative loop without a drafter (plain greedy, one token per pass): the baseline;
- reference: the engine's reference loop (models/decoding.generate), for the loop's own overhead;
- auto (what the engine's default picks: the draft decoder where it pays, else plain decoding), ngram,
  decoder (the shipped trained checkpoint if any, else untrained copies of the target's first and
  last layers), decoder-fullvocab (the same layers with a full-vocabulary head), random (deliberately bad),
  and with --feature-draft PATH, feature (the feature-level drafter of models/feature_draft.py).
It reports decode-phase time (min and median of --repeat, default 3; the variants of a clip run
interleaved, one decode each per round, in an order that rotates every round, so machine load
drifts over all alike), end-to-end time (encoder + decode), tokens per target pass and
acceptance. Streaming re-decode: decode the first N-1 s, then the first N s without a drafter and
with the engine's own re-decode settings (its `auto` drafter given the previous hypothesis, up to
HYPOTHESIS_K drafted tokens a pass: models/spec_engine.py hypothesis_spec_options), interleaved too.
Near ties: how often a speculative decode differs from the same-dtype plain decode (both tasks,
timestamps on and off). Quote figures of --repeat 3 or more only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CLIP_NAMES = ["jfk", "0870", "0880", "0890", "0920", "0930", "multilingual-en", "multilingual-de"]


def timing(values: list[float]) -> dict:
    return {"min": round(min(values), 1), "median": round(statistics.median(values), 1), "n": len(values)}


def interleaved(variants: dict, repeat: int) -> dict:
    """{label: (last result, [ms of each run])}: each round runs every variant once, the order
    rotated by one each round so that no variant always runs first (or right after another)."""
    labels, results, times = list(variants), {}, {label: [] for label in variants}
    for r in range(repeat):
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            results[label], ms = variants[label]()
            times[label].append(ms)
    return {label: (results[label], times[label]) for label in labels}


class Bench:
    """One timed decode of a window: the reference loop, or the speculative loop with a drafter."""

    def __init__(self, engine):
        self.engine = engine

    def setup(self, encoded, request, language):
        from specscribe.models.decoding import GenerateOptions, max_new_tokens

        eng, tok = self.engine, self.engine.tokenizer
        prompt = eng.prompt(request, language)
        options = GenerateOptions(
            max_new_tokens=max_new_tokens(len(prompt), request.max_new_tokens, eng.dims.n_text_ctx),
            eot=tok.eot, sot_index=prompt.index(tok.sot), no_speech=tok.no_speech,
        )
        return prompt, options, eng.rules(request)

    def reference(self, encoded, request, language):
        from specscribe.models.decoding import generate

        prompt, options, rules = self.setup(encoded, request, language)
        t0 = time.perf_counter()
        gen = generate(self.engine.session(encoded), prompt, rules, options)
        return gen, (time.perf_counter() - t0) * 1e3

    def speculative(self, encoded, request, language, make_drafter, spec=None):
        """((Generation, SpecStats), ms); spec: SpecOptions(encoded rules) -> the loop's settings, None: defaults."""
        from specscribe.models.speculative import generate_window

        prompt, options, rules = self.setup(encoded, request, language)
        drafter = make_drafter(encoded, rules)
        t0 = time.perf_counter()
        out = generate_window(self.engine.session(encoded), prompt, rules, options, drafter, self.engine.dims.n_text_ctx, spec)
        return out, (time.perf_counter() - t0) * 1e3


def full_head_twin(engine, draft):
    """The same draft layers with a head over the whole vocabulary (int8 like the reduced one under
    the int8 compute types), to measure what the reduced head saves and costs; None without one."""
    import torch

    from specscribe.models.compute import INT8_TYPES
    from specscribe.models.draft import DraftDecoder

    if draft is None or draft.vocab_ids is None or draft.is_feature:
        return None
    twin = DraftDecoder(engine.model.decoder, list(draft.decoder.layers), draft.sources, torch.arange(engine.dims.n_vocab))
    twin.shared_cross_kv = draft.shared_cross_kv
    if engine.compute_type in INT8_TYPES:
        twin.quantize_int8()  # its layers are the draft's, quantized already: only the head changes
    return twin


def drafter_factories(engine, draft, language="en", task="transcribe", feature=None):
    from specscribe.models.draft import DraftDecoderDrafter
    from specscribe.models.draft_policy import build_drafter
    from specscribe.models.drafters import NgramDrafter, RandomDrafter
    from specscribe.models.feature_draft import FeatureDrafter

    eot = engine.tokenizer.eot
    own = FeatureDrafter if draft is not None and draft.is_feature else DraftDecoderDrafter
    out = {
        "none": lambda enc, rules: None,
        "auto": lambda enc, rules: build_drafter(
            "auto", (), draft, enc.handle, rules, eot, engine.session(enc).cross, language, task
        ),
        "ngram": lambda enc, rules: NgramDrafter(),
        "decoder": lambda enc, rules: own(draft, enc.handle, rules, eot, engine.session(enc).cross),
        "random": lambda enc, rules: RandomDrafter(engine.dims.n_vocab, seed=0),
    }
    if feature is not None:
        out["feature"] = lambda enc, rules: FeatureDrafter(feature, enc.handle, rules, eot, engine.session(enc).cross)
    twin = full_head_twin(engine, draft)
    if twin is not None:
        out["decoder-fullvocab"] = lambda enc, rules: DraftDecoderDrafter(twin, enc.handle, rules, eot, engine.session(enc).cross)
    return out


def group_of(name: str, task: str) -> str:
    if task == "translate":
        return "translate"
    return "de" if name == "multilingual-de" else "en"


def run(args) -> dict:
    import torch

    from specscribe.clips import evaluation_windows
    from specscribe.machine import cpu_times, machine_info
    from specscribe.models.draft_loading import load_draft_decoder, shipped_checkpoint
    from specscribe.models.draft_policy import build_drafter
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import HYPOTHESIS_K, SpecEngine, hypothesis_spec_options
    from specscribe.models.registry import resolve_model
    from specscribe.models.types import DecodeRequest
    from specscribe.pipeline.audio import SAMPLE_RATE

    started = cpu_times()
    if args.threads:
        torch.set_num_threads(args.threads)
    engine = SpecEngine(resolve_model(args.model), EngineOptions(model=args.model, compute_type=args.compute_type, draft="decoder", draft_model=args.draft_model))
    trained = bool(args.draft_model) or shipped_checkpoint(args.model) is not None  # else: untrained layer copies
    draft = engine.draft
    feature = None
    if args.feature_draft:
        feature = load_draft_decoder(engine.model.decoder, resolve_model(args.model), args.model, args.feature_draft,
                                     engine.compute_type, untrained_ok=False)
    factories = drafter_factories(engine, draft, feature=feature)
    bench = Bench(engine)
    clips = evaluation_windows()
    names = [n for n in CLIP_NAMES if not args.clips or n in args.clips.split(",")]
    report: dict = {
        "machine": machine_info(engine.compute_type, since=started),
        "config": {
            "model": args.model, "compute_type": engine.compute_type, "threads": torch.get_num_threads(),
            "repeat": args.repeat, "order": "interleaved, rotated each round", "hypothesis_k": HYPOTHESIS_K,
            "draft_decoder": str(args.draft_model or shipped_checkpoint(args.model) or "untrained copies of target layers (0, -1)"),
            "feature_draft": args.feature_draft, "draft_trained": trained, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "clips": {}, "streaming": {}, "near_ties": {"compute_type": engine.compute_type, "decodes": 0, "differing": 0, "details": []},
    }
    runs = [(name, "transcribe") for name in names] + [(n, "translate") for n in names if n == "multilingual-de"]
    for name, task in runs:
        audio = clips[name]
        language = "de" if name == "multilingual-de" else "en"
        t0 = time.perf_counter()
        encoded = engine.encode(audio)
        encode_ms = (time.perf_counter() - t0) * 1e3
        request = DecodeRequest(task=task, language=language, timestamps=True)
        variants = {"reference_loop": lambda: bench.reference(encoded, request, language)}
        for label, make in drafter_factories(engine, draft, language, task, feature).items():
            variants[label] = lambda make=make: bench.speculative(encoded, request, language, make)
        measured = interleaved(variants, args.repeat)
        ref, ref_times = measured.pop("reference_loop")
        row = {"duration_s": round(len(audio) / SAMPLE_RATE, 2), "encode_ms": round(encode_ms, 1), "task": task,
               "group": group_of(name, task),
               "reference_loop": {"decode_ms": timing(ref_times)["median"], "decode_ms_timing": timing(ref_times),
                                  "tokens": len(ref.tokens) + 1},
               "drafters": {}}
        for label, ((gen, stats), times) in measured.items():
            ms = statistics.median(times)
            row["drafters"][label] = {
                "decode_ms": round(ms, 1), "decode_ms_timing": timing(times), "end_to_end_ms": round(ms + encode_ms, 1),
                **stats.to_dict(), "same_as_reference": gen.tokens == ref.tokens,
            }
        base = row["drafters"]["none"]["decode_ms"]
        for label, d in row["drafters"].items():
            d["decode_speedup_vs_none"] = round(base / d["decode_ms"], 3) if d["decode_ms"] else None
        name = name if task == "transcribe" else f"{name}-translate"
        report["clips"][name] = row
        if task == "translate":
            continue  # the streaming and near-tie checks below already cover both tasks
        print(f"{name}: " + ", ".join(f"{k} {v['decode_ms']:.0f} ms ({v['tokens_per_target_pass']:.2f} tok/pass)" for k, v in row["drafters"].items()), file=sys.stderr)

        # streaming re-decode: first N-1 s, then first N s drafting from the first result, as the
        # engine re-decodes (its default drafter given a hypothesis, its HYPOTHESIS_K settings)
        n = len(audio) / SAMPLE_RATE
        if n >= 3.0:
            short = engine.encode(audio[: int((n - 1.0) * SAMPLE_RATE)])
            hyp, _ = bench.reference(short, request, language)
            eot = engine.tokenizer.eot

            def from_hypothesis(enc, rules):
                return build_drafter("auto", hyp.tokens, draft, enc.handle, rules, eot, engine.session(enc).cross, language, task)

            measured = interleaved({
                "none": lambda: bench.speculative(encoded, request, language, factories["none"]),
                "hypothesis": lambda: bench.speculative(encoded, request, language, from_hypothesis,
                                                        hypothesis_spec_options(eot, hyp.tokens, engine.compute_type)),
            }, args.repeat)
            (plain, _), plain_times = measured["none"]
            (spec, st), times = measured["hypothesis"]
            plain_ms, ms = statistics.median(plain_times), statistics.median(times)
            report["streaming"][name] = {
                "n_s": round(n, 2), "none_decode_ms": round(plain_ms, 1), "hypothesis_decode_ms": round(ms, 1),
                "none_decode_ms_timing": timing(plain_times), "hypothesis_decode_ms_timing": timing(times),
                "decode_speedup": round(plain_ms / ms, 3), **{f"hypothesis_{k}": v for k, v in st.to_dict().items()},
                "same_as_plain": spec.tokens == plain.tokens,
            }

        # near ties: speculative vs the same-dtype plain decode, both tasks, timestamps on/off
        for task in ("transcribe", "translate"):
            for ts in (True, False):
                req = DecodeRequest(task=task, language=language, timestamps=ts)
                plain_ref, _ = bench.reference(encoded, req, language)
                for label in ("ngram", "decoder", "random") + (("feature",) if feature is not None else ()):
                    (gen, _), _ = bench.speculative(encoded, req, language, factories[label])
                    report["near_ties"]["decodes"] += 1
                    if gen.tokens != plain_ref.tokens:
                        report["near_ties"]["differing"] += 1
                        first = next((i for i, (a, b) in enumerate(zip(gen.tokens, plain_ref.tokens)) if a != b), None)
                        report["near_ties"]["details"].append({"clip": name, "task": task, "timestamps": ts, "drafter": label, "first_difference": first})
    report["summary"] = summarize(report)
    return report


def summarize_rows(clips: dict) -> dict:
    """Per drafter totals over some clip rows, each next to `none` on the same rows."""
    out: dict = {}
    labels = next(iter(clips.values()))["drafters"].keys() if clips else []
    none_rows = [c["drafters"]["none"] for c in clips.values()]
    none_total, none_e2e = sum(r["decode_ms"] for r in none_rows), sum(r["end_to_end_ms"] for r in none_rows)
    for label in labels:
        rows = [c["drafters"][label] for c in clips.values()]
        total = sum(r["decode_ms"] for r in rows)
        e2e = sum(r["end_to_end_ms"] for r in rows)
        drafted, passes = sum(r["drafted"] for r in rows), sum(r["target_passes"] for r in rows)
        out[label] = {
            "decode_ms_total": round(total, 1), "end_to_end_ms_total": round(e2e, 1),
            "decode_speedup_vs_none": round(none_total / total, 3) if total else None,
            "end_to_end_speedup_vs_none": round(none_e2e / e2e, 3) if e2e else None,
            "tokens_per_target_pass": round(sum(r["tokens"] for r in rows) / max(1, passes), 3),
            "acceptance_rate": round(sum(r["accepted"] for r in rows) / max(1, drafted), 4),
            "ms_per_draft_token": round(sum(r["draft_ms"] for r in rows) / drafted, 2) if drafted else None,
            "ms_per_target_pass": round(sum(r["verify_ms"] for r in rows) / max(1, passes), 2),
            "all_same_as_reference": all(r["same_as_reference"] for r in rows),
        }
    return out


def summarize(report: dict) -> dict:
    out = summarize_rows(report["clips"])
    groups = sorted({c["group"] for c in report["clips"].values()})
    out["by_group"] = {g: summarize_rows({k: c for k, c in report["clips"].items() if c["group"] == g}) for g in groups}
    s = list(report["streaming"].values())
    if s:
        plain, spec = sum(r["none_decode_ms"] for r in s), sum(r["hypothesis_decode_ms"] for r in s)
        out["streaming_hypothesis"] = {
            "decode_speedup": round(plain / spec, 3),
            "tokens_per_target_pass": round(sum(r["hypothesis_tokens"] for r in s) / max(1, sum(r["hypothesis_target_passes"] for r in s)), 3),
            "acceptance_rate": round(sum(r["hypothesis_accepted"] for r in s) / max(1, sum(r["hypothesis_drafted"] for r in s)), 4),
        }
    nt = report["near_ties"]
    out["near_tie_rate"] = round(nt["differing"] / nt["decodes"], 4) if nt["decodes"] else None
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base")
    p.add_argument("--compute-type", default="auto", help="auto (bf16 on AMX CPUs), float32, bfloat16, int8")
    p.add_argument("--draft-model", default=None, help="draft checkpoint (default: the shipped one, if any)")
    p.add_argument("--feature-draft", default=None, help="also measure this feature-level draft checkpoint (variant feature)")
    p.add_argument("--clips", default="", help="comma-separated subset of " + ",".join(CLIP_NAMES))
    p.add_argument("--repeat", type=int, default=3,
                   help="interleaved rounds (decodes per measurement); min and median are reported; 1 for a smoke run only")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = p.parse_args(argv)
    report = run(args)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
