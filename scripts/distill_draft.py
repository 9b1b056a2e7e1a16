#!/usr/bin/env python
"""Distil the draft decoder from the target Whisper model, stage by stage or all at once.

    python scripts/distill_draft.py data  --out DIR --hours 1.5           # synthesize speech
    python scripts/distill_draft.py label --data DIR [--model base]        # pseudo-labels, top-k, encoder cache
    python scripts/distill_draft.py train --data DIR --out draft.safetensors [--steps N]
    python scripts/distill_draft.py all   --out DIR --hours 1.5 --draft-out draft.safetensors

DIR defaults to $SPECSCRIBE_HOME/distill (outside git). Run long stages under `nice -n 19`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _default_dir() -> Path:
    from specscribe.models.registry import specscribe_home

    return specscribe_home() / "distill"


def cmd_data(args: argparse.Namespace) -> int:
    from specscribe.models.distill import data, synth, text

    languages = dict(data.DataOptions().languages)
    if args.languages:
        languages = {k: languages.get(k, 0.1) for k in args.languages.split(",")}
    options = data.DataOptions(hours=args.hours, seed=args.seed, languages=languages, effects=not args.no_effects)
    corpus = text.corpus(tuple(options.languages), references=text.evaluation_transcripts())
    backends = synth.available_backends(tuple(args.backends.split(",")))
    print(f"data: backends {sorted(backends)}; texts " + ", ".join(f"{k}={len(v)}" for k, v in corpus.items()))
    data.build_dataset(Path(args.out), corpus, backends, options)
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    from specscribe.models.distill import labels

    shard, _, shards = args.shard.partition("/")
    options = labels.LabelOptions(
        top_k=args.top_k, limit=args.limit, compute_type=args.compute_type, shard=(int(shard), int(shards or 1))
    )
    teacher = labels.load_teacher(args.model, options)
    summary = labels.label_dataset(Path(args.data), teacher, options)
    print(json.dumps(summary, indent=1))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from specscribe.models.distill import train

    options = train.TrainOptions(
        steps=args.steps,
        lr=args.lr,
        warmup=args.warmup,
        batch_size=args.batch_size,
        layers=tuple(int(x) for x in args.layers.split(",")),
        kl_weight=args.kl_weight,
        vocab_size=args.vocab,
        seed=args.seed,
        eval_every=args.eval_every,
        follow=args.follow,
        init=args.init,
        threads=args.threads,
        feature=args.feature,
        feature_weight=args.feature_weight,
        unroll=args.unroll,
    )
    folders = [Path(f).expanduser() for f in args.data.split(",") if f]
    result = train.train_from_folder(folders, args.model, Path(args.draft_out), options)
    print(json.dumps(result, indent=1))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Acceptance of the draft (and of its untrained initialisation), reduced heads, step costs."""
    import torch

    from specscribe.models.distill import evaluate, examples, export, labels, train
    from specscribe.models.distill.net import DraftNet

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    target, info = export.load_target_decoder(args.model)
    sequences = labels.read_labels(Path(args.data))
    train_seqs = [s for s in sequences if s.split == "train"]
    val = examples.load_examples(Path(args.data), [s for s in sequences if s.split == "val"], info["eot"])
    encoders = examples.EncoderCache(Path(args.data))
    result: dict = {"draft": args.draft, "val_sequences": len(val)}
    init = None
    if args.layers and not args.timing_only:
        init = DraftNet(target, tuple(int(x) for x in args.layers.split(",")))
        result["untrained_init"] = train.evaluate(init, val, encoders)
    net = init
    if args.draft:
        net = DraftNet(target, export.checkpoint_sources(Path(args.draft)))
        meta = export.load_draft_into(net, Path(args.draft))
        result["target_sha256_ok"] = meta.get("target_sha256") == info["sha256"]
    if net is None:
        raise ValueError("give --draft or --layers")
    sizes = [int(x) for x in args.vocab_sizes.split(",") if x]
    if args.timing_only:
        ids = {n: train.reduced_vocabulary(train_seqs, n, info["eot"], info["n_vocab"]) for n in sizes}
    else:
        result["acceptance"], ids = evaluate.vocabulary_sweep(
            net, train_seqs, val, encoders, sizes, info["eot"], info["n_vocab"]
        )
    enc = encoders.get(val[0].item).float().unsqueeze(0)
    prompt = list(val[0].inputs[: val[0].start + 1 + 20])
    compute_types = [c for c in args.compute_types.split(",") if c]
    if compute_types:  # an empty --compute-types skips the timing
        result["step_ms"] = evaluate.step_costs(target, net, enc, prompt, ids, compute_types)
    print(json.dumps(result, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))
    return 0


def cmd_all(args: argparse.Namespace) -> int:
    args.data = args.out
    for stage in (cmd_data, cmd_label, cmd_train):
        if stage(args):
            return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="stage", required=True)

    def data_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", default=str(_default_dir()), help="dataset folder (created; must be new)")
        p.add_argument("--hours", type=float, default=1.5, help="hours of audio to synthesize")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--languages", default="", help="comma list, default en,de,fr,es,it")
        p.add_argument("--backends", default="piper,festival,espeak", help="TTS backends to use (those installed)")
        p.add_argument("--no-effects", action="store_true",
                       help="no speed/reverb/telephone effects (the data of the shipped draft's recipe)")

    def label_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="base", help="target model name or folder")
        p.add_argument("--top-k", type=int, default=32, help="target logits kept per position")
        p.add_argument("--limit", type=int, default=0, help="label at most this many windows (0: all)")
        p.add_argument("--compute-type", default="auto", help="target compute type (auto, bfloat16, float32)")
        p.add_argument("--shard", default="0/1", help="I/N: label every N-th window from the I-th (parallel runs)")

    def train_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--draft-out", default="models/drafts/base-draft.safetensors")
        p.add_argument("--steps", type=int, default=2000)
        p.add_argument("--lr", type=float, default=3e-4)
        p.add_argument("--warmup", type=int, default=50, help="linear warm-up steps")
        p.add_argument("--batch-size", type=int, default=8)
        p.add_argument("--layers", default="0,5", help="target decoder layers to copy (comma list)")
        p.add_argument("--kl-weight", type=float, default=0.7, help="share of the KL term (rest: CE)")
        p.add_argument("--vocab", type=int, default=0, help="reduced draft vocabulary size (0: full)")
        p.add_argument("--eval-every", type=int, default=100)
        p.add_argument("--follow", action="store_true", help="re-read labels at each validation pass")
        p.add_argument("--init", default="", help="continue from this draft checkpoint")
        p.add_argument("--feature", action="store_true",
                       help="train a feature-level draft (reads the target's hidden states; --layers 5 for one layer)")
        p.add_argument("--feature-weight", type=float, default=0.1, help="feature drafts: weight of the state regression")
        p.add_argument("--unroll", type=int, default=2, help="feature drafts: draft steps trained (2: the second reads its own state)")
        if not any(a.dest == "threads" for a in p._actions):
            p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
        if not any(a.dest == "seed" for a in p._actions):
            p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("data", help="synthesize the training speech")
    data_args(p)
    p.set_defaults(func=cmd_data)
    p = sub.add_parser("label", help="pseudo-label with the target, cache encoder outputs and top-k logits")
    p.add_argument("--data", default=str(_default_dir()))
    label_args(p)
    p.set_defaults(func=cmd_label)
    p = sub.add_parser("train", help="train the draft decoder")
    p.add_argument("--data", default=str(_default_dir()), help="dataset folder(s), comma-separated")
    p.add_argument("--model", default="base")
    train_args(p)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("eval", help="acceptance (full and reduced heads) and draft/target step cost")
    p.add_argument("--data", default=str(_default_dir()))
    p.add_argument("--model", default="base")
    p.add_argument("--draft", default="", help="checkpoint to evaluate (default: the untrained init)")
    p.add_argument("--layers", default="0,5", help="also report the untrained init copied from these layers")
    p.add_argument("--vocab-sizes", default="2048,4096,8192", help="reduced heads to try (no retraining)")
    p.add_argument("--compute-types", default="float32,int8")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json-out", default="")
    p.add_argument("--timing-only", action="store_true", help="only the step costs")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("all", help="data, label and train in one go")
    data_args(p)
    label_args(p)
    train_args(p)
    p.set_defaults(func=cmd_all)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileExistsError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"distill_draft: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
