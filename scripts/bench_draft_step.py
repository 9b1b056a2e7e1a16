"""One draft step's cost: the draft's cross-attention the explicit way (matmuls and a float32 softmax,
models/invariant.py cross_attend_explicit, what drafts use on CPUs without AMX in bf16/fp16) against
torch's fused kernel (scaled_dot_product_attention, what they use on AMX and elsewhere), side by side
in one run. JSON out (``default``: the side models/invariant.py cross_attend_plain picks here).

    python scripts/bench_draft_step.py [--steps 40] [--repeat 5] [--out bench.json]

The shipped draft (models/drafts/base-draft.safetensors) over a real 30 s window (the lecture's
first), after a 40-token prefix of the target's own transcript: --steps one-token draft steps
(forward + head + the target's logit rules + argmax, as DraftDecoderDrafter and FeatureDrafter
run them), per side, the sides alternating every repeat. Also one target step, for scale.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="-")
    args = parser.parse_args(argv)
    import torch
    from faster_whisper.audio import decode_audio

    from specscribe.clips import clips_dir
    from specscribe.machine import cpu_times, machine_info, write_report
    from specscribe.models import whisper
    from specscribe.models.draft import draft_token
    from specscribe.models.engines import EngineOptions
    from specscribe.models.invariant import attend, cross_attend_explicit, few_row_attention_is_slow
    from specscribe.models.registry import resolve_model
    from specscribe.models.spec_engine import SpecEngine
    from specscribe.models.types import DecodeRequest

    since = cpu_times()
    audio = decode_audio(str(clips_dir() / "physicsworks.wav"), sampling_rate=16000)[: 16000 * 30]
    engine = SpecEngine(resolve_model("base"), EngineOptions(model="base", draft="decoder"))
    request = DecodeRequest(language="en", timestamps=True)
    encoded = engine.encode(audio)
    tokens = list(engine.decode(encoded, request).tokens)
    prompt, rules, draft = engine.prompt(request, "en"), engine.rules(request), engine.draft
    prefix = 40
    steps = min(args.steps, len(tokens) - prefix - 1)
    plain = whisper.cross_attend_plain
    sides = {"explicit": cross_attend_explicit, "fused": lambda q, k, v: attend(q, k, v, None)}

    def draft_steps() -> float:
        """ms per draft step over `steps` one-token steps after the prefix."""
        session = draft.session(encoded.handle, engine.session(encoded).cross)
        d = draft.decoder.positional_embedding.shape[1]
        seq = prompt + tokens[:prefix]
        features = torch.zeros(len(seq), d, dtype=session.dtype) if draft.is_feature else None
        kw = {"features": features} if draft.is_feature else {}
        session.forward(seq, logits_from=len(seq) - 1, **kw)
        t0 = time.perf_counter()
        for i in range(prefix, prefix + steps):
            kw = {"features": session.hidden[-1:]} if draft.is_feature else {}
            head = session.forward([tokens[i]], logits_from=0, **kw)[-1]
            draft_token(draft, head, rules, tokens[: i + 1], 0.0, None, [])
        return (time.perf_counter() - t0) / steps * 1e3

    def target_step() -> float:
        session = engine.session(encoded)
        session.forward(prompt + tokens[:prefix])
        t0 = time.perf_counter()
        for i in range(prefix, prefix + steps):
            session.forward([tokens[i]])
        return (time.perf_counter() - t0) / steps * 1e3

    times: dict[str, list[float]] = {label: [] for label in (*sides, "target")}
    labels = [*sides, "target"]
    try:
        for r in range(args.repeat):
            for label in labels[r % len(labels):] + labels[: r % len(labels)]:
                if label == "target":
                    times[label].append(target_step())
                    continue
                whisper.cross_attend_plain = sides[label]  # the name DecoderLayer calls (models/whisper.py imports it)
                times[label].append(draft_steps())
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in times.items()), file=sys.stderr)
    finally:
        whisper.cross_attend_plain = plain
    medians = {label: round(statistics.median(v), 3) for label, v in times.items()}
    report = {
        "draft": "shipped (models/drafts/base-draft.safetensors)", "feature_draft": draft.is_feature,
        "window": "physicsworks 0-30 s", "prefix_tokens": prefix, "steps": steps, "repeat": args.repeat,
        "order": "explicit, fused, target rotated by one each repeat",
        "ms_per_step": {label: [round(x, 3) for x in v] for label, v in times.items()},
        "median_ms": medians,
        "fused_over_explicit": round(medians["fused"] / medians["explicit"], 3),
        "default": "explicit" if few_row_attention_is_slow() else "fused",
        "draft_over_target": {side: round(medians[side] / medians["target"], 3) for side in sides},
        "machine": machine_info(engine.compute_type, since),
    }
    write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
