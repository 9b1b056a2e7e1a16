"""Target decoder pass cost, batch throughput, and the spec engine against faster-whisper (CPU or CUDA).

ONE JSON (--out, default stdout): `machine` (specscribe.machine) and the --sections below, each
over --repeat rounds that interleave the variants it compares (their order rotates per round, so
drift in machine load hits all alike); min and median reported.

pass_ms     ONE target decoder pass on the real model: sessions over real encoded 30 s windows,
            after the 4-token prompt (sot, en, transcribe, notimestamps); a pass appends new
            tokens, then every session is cropped back to 4. by_rows: R tokens of one sequence
            (--rows; verifying R - 1 drafts). by_sequences: B sessions of one token each (--seqs;
            what batch transcription runs). by_prompt: a fresh session's prefill of P prompt tokens
            (--prompts), logits for the last row only, as a decode's first pass. Per --compute-types
            (engines with draft "none"), both
            batch-invariant (blocks of PassShape.rows zero-padded rows, models/invariant.py) and
            plain (decoder.pass_shape = None: one kernel call for all rows, same packed weights),
            so the price of invariance shows. PASSES timed passes per variant and round, after
            an untimed one; table_md holds the medians as a markdown table.
throughput  B distinct windows decoded together (SpecEngine.decode_loop: one target pass per step
            for all; --batches), greedy, language "en", at --spec-compute, with drafts (draft
            "auto": the shipped draft decoder where it pays) and without ("none"): output tokens
            per second of wall time (session set-up and cross K/V included), passes, sequences and
            rows per pass (BatchDecoder.steps), acceptance; and `identical`: every window's tokens
            the same at every batch size, with and without drafts (lossless; not asserted here).
engines     per clip (--clips), a window as users run it (features, encoder, language detection,
            greedy decode with timestamps): the spec engine (draft "auto") against faster-whisper/
            CTranslate2 (encode + generate, int8, beam 1, max_length 448), interleaved. Spec time
            is split by timing TextDecoder.run_pass: prompt passes (a part with prompt rows or a
            fresh session), steps (other target passes), draft decoder passes; the rest of decode
            is rules and overhead.

kernels     (--device cuda only) per pass shape (1 row; 16 rows of one sequence; 1, 16 and 64
            sequences of one row), invariant passes of the first --compute-types: wall ms per pass
            against the ms its CUDA kernels ran (torch.profiler). Where wall >> kernels, the pass is
            bound by kernel launches on the host, and a CUDA graph of the decoder step would pay.

--device cuda: the spec engine on the GPU (engines load there; passes are timed to a
torch.cuda.synchronize()); the engines section needs the CPU (faster-whisper int8).

Windows: the eight evaluation windows (specscribe.clips), then 30 s windows of physicsworks.wav
("physicsworks@30s" starts at 30 s: every 30 s, then the 15 s offsets), each encoded once, untimed.
The engines clips: the evaluation windows and physicsworks@0s.

Known caveat: `engines` runs CTranslate2 and torch in one process, and once CTranslate2 has run,
torch's passes are about 1.7x slower (two OpenMP runtimes; docs/benchmarks.md). Its spec figures are
too slow; run that section in a process of its own, last, and read it with that in mind. The other
sections run before CTranslate2 is loaded.

    python scripts/bench_engines.py --out bench.json [--repeat 3] [--sections pass_ms,throughput,engines]
        [--compute-types float32,bfloat16] [--spec-compute auto] [--threads 0] [--clips jfk,0870]
        [--rows 1,2,4,8,16,32,64] [--seqs 1,4,8,16] [--batches 1,4,8,16]
"""

from __future__ import annotations

import argparse
import collections
import resource
import statistics
import sys
import time

SECTIONS = ("pass_ms", "throughput", "engines", "kernels")
PASSES = 5  # timed passes per variant and round in pass_ms
MODES = ("invariant", "plain")


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def summary(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "n": len(values)}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def window_pool() -> dict:
    """{name: audio <= 30 s}: the evaluation windows, then the lecture's windows (>= 10 s each)."""
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    from specscribe.clips import clips_dir, evaluation_windows

    pool = evaluation_windows()
    lecture = load_audio(clips_dir() / "physicsworks.wav")
    end = len(lecture) // SAMPLE_RATE - 10
    for start in [*range(0, end, 30), *range(15, end, 30)]:
        pool[f"physicsworks@{start}s"] = lecture[start * SAMPLE_RATE : (start + 30) * SAMPLE_RATE]
    return pool


def pick(names: list[str], n: int) -> list[str]:
    if n > len(names):
        raise SystemExit(f"{n} distinct windows asked for, only {len(names)} available")
    return names[:n]


class Engines:
    """SpecEngines on `device` by (compute type, draft), each loaded once; load_s their load times."""

    def __init__(self, model: str, threads: int, device: str = "cpu"):
        self.model, self.threads, self.device, self.loaded, self.load_s = model, threads, device, {}, {}

    def get(self, compute_type: str, draft: str):
        """compute_type may carry the pass block, the query block and the row calls, "bfloat16:8",
        "bfloat16:8:4" or "bfloat16:0:0:blocks" (EngineOptions.pass_rows, query_block, row_calls; 0 = the default)."""
        if (compute_type, draft) not in self.loaded:
            from specscribe.models.engines import EngineOptions
            from specscribe.models.registry import resolve_model
            from specscribe.models.spec_engine import SpecEngine

            started = time.perf_counter()
            name, rows, query, calls = (compute_type.split(":") + ["", "", ""])[:4]
            options = EngineOptions(
                engine="spec", model=self.model, device=self.device, compute_type=name, draft=draft, threads=self.threads,
                pass_rows=int(rows or 0), query_block=int(query or 0), row_calls=calls or "auto",
            )
            self.loaded[compute_type, draft] = SpecEngine(resolve_model(self.model), options)
            self.load_s[f"{compute_type}/{draft}"] = round(time.perf_counter() - started, 2)
        return self.loaded[compute_type, draft]


# --- pass_ms ---------------------------------------------------------------------------------


def time_passes(decoder, mode: str, sessions: list, tokens: list[list[int]], keep: int,
                head_last: bool = False) -> list[float]:
    """ms of PASSES passes (after an untimed one) appending tokens[i] to sessions[i], each session
    cropped back to `keep` after each; mode "plain" runs them with decoder.pass_shape = None.
    head_last: only each part's last row goes through the output head (a prompt's prefill).
    On CUDA a pass is timed to the end of its kernels (torch.cuda.synchronize)."""
    from specscribe.models.whisper import PassPart

    shape, out, sync = decoder.pass_shape, [], synchronizer(decoder)
    decoder.pass_shape = shape if mode == "invariant" else None
    try:
        for i in range(PASSES + 1):
            started = time.perf_counter()
            decoder.run_pass([PassPart(s, t, len(t) - 1 if head_last else 0) for s, t in zip(sessions, tokens)])
            sync()
            out.append((time.perf_counter() - started) * 1000)
            for s in sessions:
                s.crop(keep)
    finally:
        decoder.pass_shape = shape
    return out[1:]


def synchronizer(decoder):
    """A no-op on CPU; torch.cuda.synchronize where the decoder's weights are on a GPU."""
    import torch

    return torch.cuda.synchronize if next(decoder.parameters()).is_cuda else (lambda: None)


def pass_setups(engines: Engines, types: list[str], n_sessions: int, pool: dict, tokens: int) -> tuple[list[str], dict]:
    """(window names, {compute type: (decoder, sessions, text, prompt length, fresh session)}):
    n_sessions sessions per compute type over real encoded windows (30 s of speech first), each
    after the 4-token prompt; text: `tokens` or more tokens of JFK's sentence to append."""
    from specscribe.clips import JFK_TEXT

    names = pick(sorted(pool, key=lambda n: not n.startswith("physicsworks")), n_sessions)
    encoded = [engines.get(types[0], "none").encode(pool[n]).handle for n in names]  # cross K/V cast it
    setups = {}
    for ct in types:
        engine = engines.get(ct, "none")
        tok, decoder = engine.tokenizer, engine.model.decoder
        prompt = tok.sot_sequence("transcribe", "en") + [tok.no_timestamps]
        sessions = [decoder.session(enc) for enc in encoded]
        for s in sessions:
            s.forward(prompt)
        text = tok.encode(" " + JFK_TEXT) * max(1, tokens)
        setups[ct] = (decoder, sessions, text, len(prompt), decoder.session(encoded[0]))
    return names, setups


def bench_pass_ms(engines: Engines, types: list[str], rows: list[int], seqs: list[int], pool: dict, repeat: int,
                  prompts: list[int] = ()) -> dict:
    names, setups = pass_setups(engines, types, max(seqs), pool, max([*rows, *prompts]))
    variants = [(ct, mode) for ct in types for mode in MODES]
    jobs = [("by_rows", n) for n in rows] + [("by_sequences", n) for n in seqs] + [("by_prompt", n) for n in prompts]
    samples = collections.defaultdict(list)
    for rnd in range(repeat):
        for i, (table, n) in enumerate(jobs):
            shift = (rnd + i) % len(variants)
            for ct, mode in variants[shift:] + variants[:shift]:
                decoder, sessions, text, keep, fresh = setups[ct]
                if table == "by_rows":  # one sequence, n rows
                    ms = time_passes(decoder, mode, sessions[:1], [text[:n]], keep)
                elif table == "by_prompt":  # a fresh session's prompt of n tokens
                    ms = time_passes(decoder, mode, [fresh], [text[:n]], 0, head_last=True)
                else:  # n sequences, one row each
                    ms = time_passes(decoder, mode, sessions[:n], [[t] for t in text[:n]], keep)
                samples[table, ct, mode, n] += ms
        log(f"pass_ms: round {rnd + 1}/{repeat} done")
    shapes = {ct: setups[ct][0].pass_shape for ct in types}
    report = {"passes_per_sample": PASSES, "windows": names, "block_rows": {ct: s.rows for ct, s in shapes.items()},
              "query_block": {ct: s.query_block for ct, s in shapes.items()},
              "whole_calls": {ct: s.whole for ct, s in shapes.items()}}
    for table, sizes in (("by_rows", rows), ("by_sequences", seqs), ("by_prompt", prompts)):
        report[table] = {
            ct: {m: {str(n): summary(samples[table, ct, m, n]) for n in sizes} for m in MODES} for ct in types
        }
    tables = (("by_rows", rows, "row"), ("by_sequences", seqs, "sequence"), ("by_prompt", prompts, "prompt token"))
    report["table_md"] = "\n\n".join(markdown(report[t], s, u) for t, s, u in tables if s)
    log(report["table_md"])
    return report


def markdown(table: dict, sizes: list[int], unit: str) -> str:
    """Median ms per pass: | compute type | pass | 1 row | 2 | 4 ... |."""
    head = [f"{n} {unit}{'s' * (n > 1)}" if i == 0 else str(n) for i, n in enumerate(sizes)]
    lines = ["| compute type | pass | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(sizes)]
    for ct, modes in table.items():
        for mode, cells in modes.items():
            lines.append(f"| {ct} | {mode} | " + " | ".join(f"{cells[str(n)]['median']:.2f}" for n in sizes) + " |")
    return "\n".join(lines)


# --- throughput ------------------------------------------------------------------------------


def decode_together(engine, items: list) -> dict:
    """Decode the (encoded, request) items in one loop; wall ms from the first submit to the end."""
    started = time.perf_counter()
    loop = engine.decode_loop()
    for i, (encoded, request) in enumerate(items):
        loop.submit(i, encoded, request)
    results: dict = {}
    while len(loop):
        results.update(loop.step())
    wall = (time.perf_counter() - started) * 1000
    return {"wall_ms": wall, "results": [results[i] for i in range(len(items))], "steps": loop.batch.totals}


def throughput_row(runs: list[dict]) -> dict:
    """Wall time and tokens/s over the rounds; passes and acceptance of the last round."""
    from specscribe.models.types import SpecStats

    walls, last, steps = [r["wall_ms"] for r in runs], runs[-1]["results"], runs[-1]["steps"]
    tokens = sum(len(r.tokens) for r in last)  # output tokens, end-of-text not counted
    stats = sum((r.stats for r in last), SpecStats())
    return {
        "wall_ms": summary(walls),
        "tokens": tokens,
        "tokens_per_s": {"best": round(tokens * 1000 / min(walls), 1), "median": round(tokens * 1000 / statistics.median(walls), 1)},
        "passes": steps.passes,
        "emitted_per_pass": round(stats.tokens / steps.passes, 2),  # end-of-text counted
        "sequences_per_pass": round(steps.sequences / steps.passes, 2),
        "rows_per_pass": round(steps.rows / steps.passes, 2),
        "pass_ms_total": round(steps.pass_ms, 1),
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance": round(stats.acceptance_rate, 4),
    }


def bench_throughput(engines: Engines, compute_type: str, batches: list[int], pool: dict, repeat: int) -> dict:
    from specscribe.models.types import DecodeRequest

    variants = {"drafts": engines.get(compute_type, "auto"), "none": engines.get(compute_type, "none")}
    names = pick(list(pool), max(batches))
    encoded = [variants["none"].encode(pool[n]) for n in names]  # one encoding, both engines
    request = DecodeRequest(language="en")
    for engine in variants.values():  # warm-up
        decode_together(engine, [(encoded[0], request)])
    runs = collections.defaultdict(list)
    for rnd in range(repeat):
        for i, b in enumerate(batches):
            for v in list(variants)[:: 1 if (rnd + i) % 2 == 0 else -1]:
                runs[b, v].append(decode_together(variants[v], [(e, request) for e in encoded[:b]]))
                log(f"throughput B={b:2d} {v:6s} {runs[b, v][-1]['wall_ms']:9.1f} ms")
    seen = collections.defaultdict(set)  # window -> every token tuple it decoded to
    for batch_runs in runs.values():
        for run in batch_runs:
            for name, result in zip(names, run["results"]):
                seen[name].add(result.tokens)
    mismatched = [name for name, found in seen.items() if len(found) > 1]
    return {
        "compute_type": compute_type,
        "draft_decoder_loaded": variants["drafts"].draft is not None,
        "request": {"language": "en", "task": request.task, "timestamps": request.timestamps},
        "windows": names,
        "by_batch": {str(b): {v: throughput_row(runs[b, v]) for v in variants} for b in batches},
        "identical": not mismatched,
        "mismatched_windows": mismatched,
    }


# --- kernels (CUDA) --------------------------------------------------------------------------

KERNEL_SHAPES = (("rows", 1), ("rows", 16), ("sequences", 1), ("sequences", 16), ("sequences", 64))


def bench_kernels(engines: Engines, compute_type: str, pool: dict) -> dict:
    """Per shape: wall ms per invariant pass (synchronized) and the ms its CUDA kernels ran, from
    torch.profiler over PASSES passes; launch_bound_share = 1 - kernels / wall."""
    from torch.profiler import ProfilerActivity, profile

    most = max(n for kind, n in KERNEL_SHAPES if kind == "sequences")
    names, setups = pass_setups(engines, [compute_type], min(most, len(pool)), pool, 16)
    decoder, sessions, text, keep, _ = setups[compute_type]
    out = {"compute_type": compute_type, "windows": len(names)}
    for kind, n in KERNEL_SHAPES:
        if kind == "rows":
            parts = (sessions[:1], [text[:n]])
        else:
            n = min(n, len(sessions))
            parts = (sessions[:n], [[t] for t in text[:n]])
        time_passes(decoder, "invariant", *parts, keep)  # warm-up
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            wall = time_passes(decoder, "invariant", *parts, keep)
        kernel_us = sum(getattr(e, "self_device_time_total", 0) for e in prof.key_averages())
        kernels = kernel_us / 1000 / (PASSES + 1)  # time_passes runs one untimed pass first
        median = statistics.median(wall)
        out[f"{kind}_{n}"] = {"wall_ms": round(median, 3), "kernel_ms": round(kernels, 3),
                              "launch_bound_share": round(1 - kernels / median, 3)}
        log(f"kernels {kind} {n}: wall {median:.2f} ms, kernels {kernels:.2f} ms")
    return out


# --- engines ---------------------------------------------------------------------------------


class PassTimer:
    """While entered, times every TextDecoder.run_pass (wrapped on the class) by kind: "language"
    (inside the engine's detect_language), "draft" (a decoder other than the engine's target),
    "prompt" (a part with prompt rows, or a fresh session), else "step". language_cross_kv: the
    cross K/V time that StageTimes counts in both `cross_kv` and `language` (the detection's
    session computes the window's K/V first)."""

    def __init__(self, engine):
        self.engine, self.label, self.language_cross_kv = engine, None, 0.0
        self.ms, self.n = collections.Counter(), collections.Counter()

    def kind(self, decoder, parts) -> str:
        if self.label or decoder is not self.engine.model.decoder:
            return self.label or "draft"
        fresh = any((p.prompt_rows or 0) > 0 or (p.prompt_rows is None and p.session.length == 0) for p in parts)
        return "prompt" if fresh else "step"

    def __enter__(self):
        from specscribe.models.whisper import TextDecoder

        self._run_pass, detect = TextDecoder.run_pass, self.engine.detect_language

        def run_pass(decoder, parts, want_scores=False):
            kind, started = self.kind(decoder, parts), time.perf_counter()
            try:
                return self._run_pass(decoder, parts, want_scores)
            finally:
                self.ms[kind] += (time.perf_counter() - started) * 1000
                self.n[kind] += 1

        def detect_language(encoded):
            self.label, cross_kv = "language", self.engine.times.cross_kv
            try:
                return detect(encoded)
            finally:
                self.label = None
                self.language_cross_kv += self.engine.times.cross_kv - cross_kv

        TextDecoder.run_pass, self.engine.detect_language = run_pass, detect_language
        return self

    def __exit__(self, *exc) -> None:
        from specscribe.models.whisper import TextDecoder

        TextDecoder.run_pass = self._run_pass
        del self.engine.detect_language  # the class's method again


def run_spec(engine, timer: PassTimer, audio) -> dict:
    from specscribe.models.types import DecodeRequest

    t0, ms0, n0, lang_kv = dict(vars(engine.times)), timer.ms.copy(), timer.n.copy(), timer.language_cross_kv
    started = time.perf_counter()
    result = engine.decode(engine.encode(audio), DecodeRequest(language=None, timestamps=True))
    wall = (time.perf_counter() - started) * 1000
    d = {k: v - t0[k] for k, v in vars(engine.times).items()}
    ms = {k: timer.ms[k] - ms0[k] for k in ("prompt", "step", "draft")}
    n = {k: timer.n[k] - n0[k] for k in ("step", "draft")}
    breakdown = {k: round(d[k], 1) for k in ("features", "encoder", "cross_kv")}
    return {
        "wall_ms": round(wall, 1),
        "tokens": list(result.tokens),
        "acceptance": round(result.stats.acceptance_rate, 4),
        "breakdown_ms": {
            **breakdown,
            "language_detection": round(d["language"] - (timer.language_cross_kv - lang_kv), 1),  # cross K/V apart
            "prompt_passes": round(ms["prompt"], 1),
            "decoder_steps": round(ms["step"], 1),
            "n_steps": n["step"],
            "ms_per_step": round(ms["step"] / n["step"], 2) if n["step"] else None,
            "draft_passes": round(ms["draft"], 1),
            "n_draft_passes": n["draft"],
            "rules_and_overhead": round(d["decode_total"] - sum(ms.values()), 1),
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

    def ms(a: float, b: float) -> float:
        return round((b - a) * 1000, 1)

    return {
        "wall_ms": ms(started, done),
        "tokens": list(res.sequences_ids[0]),
        "breakdown_ms": {"features": ms(started, t_feat), "encoder": ms(t_feat, t_enc),
                         "language_detection": ms(t_enc, t_lang), "generate": ms(t_lang, done)},
    }


def bench_engines(engines: Engines, compute_type: str, threads: int, clips: dict, repeat: int) -> dict:
    from faster_whisper import WhisperModel
    from specscribe.models.registry import resolve_model

    spec = engines.get(compute_type, "auto")
    started = time.perf_counter()
    fw = WhisperModel(str(resolve_model(engines.model)), device="cpu", compute_type="int8", cpu_threads=threads)
    engines.load_s["ct2/int8"] = round(time.perf_counter() - started, 2)
    runs = {name: {"spec": [], "ct2": []} for name in clips}
    with PassTimer(spec) as timer:
        first = next(iter(clips.values()))  # warm-up, not timed
        run_spec(spec, timer, first)
        run_ct2(fw, first)
        for rnd in range(repeat):
            for i, (name, audio) in enumerate(clips.items()):
                for side in ("spec", "ct2")[:: 1 if (rnd + i) % 2 == 0 else -1]:
                    runs[name][side].append(run_spec(spec, timer, audio) if side == "spec" else run_ct2(fw, audio))
                    log(f"engines {name:18s} {side:4s} {runs[name][side][-1]['wall_ms']:9.1f} ms")
    per_clip = {}
    for name, audio in clips.items():
        (s, last_s), (c, last_c) = ((summary([r["wall_ms"] for r in rs]), rs[-1]) for rs in runs[name].values())
        per_clip[name] = {
            "audio_s": round(len(audio) / 16000, 2),
            "spec_ms": s,
            "ct2_ms": c,
            "ratio_spec_over_ct2": round(s["median"] / c["median"], 3),
            "spec_tokens": len(last_s["tokens"]),
            "ct2_tokens": len(last_c["tokens"]),
            "same_tokens": last_s["tokens"] == last_c["tokens"],
            "spec_acceptance": last_s["acceptance"],
            "spec_breakdown_ms": last_s["breakdown_ms"],
            "ct2_breakdown_ms": last_c["breakdown_ms"],
        }
    total = {side: round(sum(v[f"{side}_ms"]["median"] for v in per_clip.values()), 1) for side in ("spec", "ct2")}
    keys = [k for k in next(iter(per_clip.values()))["spec_breakdown_ms"] if k != "ms_per_step"]
    breakdown = {k: round(sum(v["spec_breakdown_ms"][k] for v in per_clip.values()), 1) for k in keys}
    return {
        "spec_compute_type": compute_type,
        "spec_draft": "auto",
        "ct2_compute_type": "int8",
        "total_median_ms": {**total, "ratio_spec_over_ct2": round(total["spec"] / total["ct2"], 3)},
        "spec_breakdown_total_ms": breakdown,  # of each clip's last round
        "spec_ms_per_decoder_step": round(breakdown["decoder_steps"] / breakdown["n_steps"], 2) if breakdown["n_steps"] else None,
        "clips": per_clip,
    }


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="base")
    p.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds per section")
    p.add_argument("--sections", default="pass_ms,throughput,engines", help="comma list of " + ", ".join(SECTIONS))
    p.add_argument("--compute-types", default="float32,bfloat16", help="compute types of pass_ms; TYPE:N sets the pass block to N rows, TYPE:N:Q the query block to Q, TYPE:0:0:blocks the row calls (0: default)")
    p.add_argument("--spec-compute", default="auto", help="compute type of throughput and engines")
    p.add_argument("--threads", type=int, default=0, help="threads for both engines (0: library default)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the spec engine runs")
    p.add_argument("--clips", default="", help="comma list of clips for engines (default: all)")
    p.add_argument("--rows", default="1,2,4,8,16,32,64", help="rows per pass (pass_ms by_rows)")
    p.add_argument("--seqs", default="1,4,8,16", help="sequences per pass (pass_ms by_sequences)")
    p.add_argument("--prompts", default="4,16,50,120", help="prompt tokens of a prefill (pass_ms by_prompt)")
    p.add_argument("--batches", default="1,4,8,16", help="windows decoded together (throughput)")
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    if not args.sections or set(args.sections) - set(SECTIONS):
        p.error(f"--sections: a comma list of {', '.join(SECTIONS)}")
    if args.device == "cuda" and "engines" in args.sections:
        p.error("--sections engines compares against faster-whisper on the CPU: run it with --device cpu")
    if args.device == "cpu" and "kernels" in args.sections:
        p.error("--sections kernels profiles CUDA kernels: run it with --device cuda")
    sizes = [*ints(args.rows), *ints(args.seqs), *ints(args.batches), *ints(args.prompts)]
    if args.repeat < 1 or min(sizes or [0]) < 1:
        p.error("--repeat, --rows, --seqs, --batches and --prompts need positive values")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from specscribe.machine import cpu_times, machine_info
    from specscribe.models.compute import resolve_compute_type

    started = cpu_times()

    def resolve(t: str) -> str:  # "auto:8" -> "bfloat16:8"
        name, sep, rows = t.partition(":")
        return resolve_compute_type(name, args.device) + sep + rows

    types = list(dict.fromkeys(resolve(t) for t in args.compute_types.split(",") if t))
    spec = resolve_compute_type(args.spec_compute, args.device)
    pool, engines, sections = window_pool(), Engines(args.model, args.threads, args.device), {}
    if "pass_ms" in args.sections:
        sections["pass_ms"] = bench_pass_ms(engines, types, ints(args.rows), ints(args.seqs), pool, args.repeat,
                                               ints(args.prompts))
    if "throughput" in args.sections:
        sections["throughput"] = bench_throughput(engines, spec, ints(args.batches), pool, args.repeat)
    if "kernels" in args.sections:
        sections["kernels"] = bench_kernels(engines, types[0], pool)
    if "engines" in args.sections:
        clips = [*list(pool)[:8], "physicsworks@0s"]
        wanted = args.clips.split(",") if args.clips else clips
        if missing := [n for n in wanted if n not in clips]:
            raise SystemExit(f"unknown clips {missing}; choose from {', '.join(clips)}")
        sections["engines"] = bench_engines(engines, spec, args.threads, {n: pool[n] for n in wanted}, args.repeat)
    ran = list(dict.fromkeys(ct for ct, _ in engines.loaded))
    report = {
        "machine": {**machine_info(spec if spec in ran else ran[0], since=started), "compute_types": ran},
        "model": args.model,
        "device": args.device,
        "repeat": args.repeat,
        "threads_option": args.threads,
        "load_s": engines.load_s,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        **sections,
    }
    from specscribe.machine import write_report

    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
