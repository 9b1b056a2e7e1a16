"""Train the draft decoder on the target's pseudo-labels: KL to the target's top-k distribution
plus cross-entropy on the label; AdamW; encoder outputs read from the label cache (the encoder
never runs). Progress (loss, validation acceptance, tokens per target pass) goes to stdout and
to ``train_log.jsonl`` beside the checkpoint, so a run can be watched.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from specscribe.models.distill.examples import Batch, CrossCache, EncoderCache, Example, collate, load_examples
from specscribe.models.distill.labels import LabelledSequence, read_labels
from specscribe.models.distill.metrics import acceptance_report
from specscribe.models.distill.net import DraftNet


@dataclass(frozen=True)
class TrainOptions:
    """How to train.

    Attributes:
        steps: optimizer steps.
        lr: peak learning rate (linear warm-up, cosine decay to 10 %).
        warmup: warm-up steps.
        batch_size: sequences per step.
        layers: target decoder layers copied into the draft.
        kl_weight: weight of the KL term; the cross-entropy term gets 1 - kl_weight.
        vocab_size: size of a reduced draft head (0: the full vocabulary).
        freeze_cross_kv: keep the target's cross-attention K/V projection (shareable at inference).
        weight_decay: AdamW weight decay.
        eval_every: steps between validation passes.
        max_val: validation sequences used per pass (0: all).
        seed: seed of initialisation order and batch sampling.
        dtype: "auto" (bf16 autocast where the CPU has AMX/AVX512-BF16 or on CUDA, else float32),
            "bfloat16" or "float32".
        device: "cpu" or "cuda".
        threads: torch threads (1 suits a shared 2-core machine; 0 keeps torch's default).
        follow: re-read the labels at each validation pass (train while the label stage runs).
        init: a draft checkpoint to continue from (its layer sources replace ``layers``).
        feature: train a feature-level draft (models/distill/feature_net.py) on the target's
            hidden states (the label stage's feat/ files) instead of a draft decoder.
        feature_weight: weight of the feature drafter's state regression (smooth L1).
        unroll: draft steps a feature drafter is trained over (2: the second reads its own state).
    """

    steps: int = 2000
    lr: float = 3e-4
    warmup: int = 50
    batch_size: int = 8
    layers: tuple[int, ...] = (0, 5)
    kl_weight: float = 0.7
    vocab_size: int = 0
    freeze_cross_kv: bool = True
    weight_decay: float = 0.01
    eval_every: int = 100
    max_val: int = 0
    seed: int = 0
    dtype: str = "auto"
    device: str = "cpu"
    threads: int = 1
    follow: bool = False
    init: str = ""
    feature: bool = False
    feature_weight: float = 0.1
    unroll: int = 2


def distill_loss(logits: torch.Tensor, batch: Batch, kl_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    """logits (B, L, N), or (M, N) at batch.mask -> kl_weight * KL(p_topk || q) + (1 - kl_weight) * CE."""
    sel = batch.mask  # (B, L)
    logits = logits.float()
    logq = torch.log_softmax(logits[sel] if logits.dim() == 3 else logits, dim=-1)  # (M, N)
    idx = batch.topk_indices[sel]  # (M, k)
    valid = idx >= 0
    p = torch.softmax(batch.topk_values[sel].masked_fill(~valid, -1.0e4), dim=-1)  # (M, k)
    p = p * valid
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
    logq_k = logq.gather(1, idx.clamp_min(0))  # (M, k)
    kl = (p * (torch.log(p.clamp_min(1e-9)) - logq_k)).sum(-1).mean()
    targets = batch.targets[sel]
    ce = F.nll_loss(logq, targets, ignore_index=-100) if (targets >= 0).any() else logq.sum() * 0
    loss = kl_weight * kl + (1 - kl_weight) * ce
    return loss, {"kl": float(kl.detach()), "ce": float(ce.detach())}


def reduced_vocabulary(sequences: Sequence[LabelledSequence], size: int, first_special: int, n_vocab: int) -> torch.Tensor:
    """The `size` most frequent label tokens plus every special and timestamp id (>= first_special)."""
    counts = Counter(t for s in sequences for t in s.tokens if t < first_special)
    common = [t for t, _ in counts.most_common(max(0, size - (n_vocab - first_special)))]
    return torch.tensor(sorted(set(common) | set(range(first_special, n_vocab))), dtype=torch.long)


def head_index_of(vocab_ids: torch.Tensor | None, n_vocab: int) -> torch.Tensor | None:
    if vocab_ids is None:
        return None
    index = torch.full((n_vocab,), -1, dtype=torch.long)
    index[vocab_ids.cpu()] = torch.arange(len(vocab_ids))  # batches are built on the CPU
    return index


def _autocast(options: TrainOptions):
    from specscribe.models.compute import cpu_has_fast_bf16

    use_bf16 = options.dtype == "bfloat16" or (
        options.dtype == "auto" and (options.device == "cuda" or cpu_has_fast_bf16())
    )
    return torch.autocast(options.device, dtype=torch.bfloat16, enabled=use_bf16), use_bf16


def _cross(net: DraftNet, crosses: CrossCache | None, examples: Sequence[Example]):
    return crosses.batch([e.item for e in examples]) if crosses is not None and net.freeze_cross_kv else None


def evaluate(
    net: DraftNet,
    examples: Sequence[Example],
    encoders: EncoderCache,
    batch_size: int = 8,
    crosses: CrossCache | None = None,
) -> dict[str, Any]:
    """Teacher-forced greedy agreement on examples: per-position acceptance and tokens per pass."""
    head_index = head_index_of(net.vocab_ids, net.embedding.shape[0])
    matches: list[tuple[str, list[bool]]] = []
    net.eval()
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            batch = collate(chunk, encoders, head_index, str(net.embedding.device))
            pred = net(batch.tokens, batch.enc, _cross(net, crosses, chunk), batch.mask).argmax(-1)  # (M,)
            targets = batch.targets[batch.mask]  # (M,)
            ok = ((pred == targets) & (targets >= 0)).tolist()
            start = 0
            for j, e in enumerate(chunk):
                n = int(batch.mask[j].sum())
                matches.append((e.group, ok[start : start + n]))
                start += n
    net.train()
    return acceptance_report(matches)


def example_loss(net: DraftNet, chunk: Sequence[Any], encoders: EncoderCache, crosses: CrossCache,
                 head_index: torch.Tensor | None, options: TrainOptions) -> tuple[torch.Tensor, dict[str, float]]:
    """The training loss of one batch of examples (FeatureExamples with options.feature), under
    bf16 autocast where options.dtype asks for it; (loss, {"kl", "ce"[, "feature"]})."""
    context, _ = _autocast(options)
    if options.feature:
        from specscribe.models.distill.feature_net import collate_features, feature_loss

        batch = collate_features(chunk, encoders, head_index, options.device)
        cross = crosses.batch([e.item for e in chunk])  # outside autocast: its fp16 cache
        with context:
            return feature_loss(net, batch, cross, options.kl_weight, options.feature_weight, options.unroll)
    batch = collate(chunk, encoders, head_index, options.device)
    cross = _cross(net, crosses, chunk)  # outside autocast: CPU autocast refuses the fp16 cache's cat
    with context:
        logits = net(batch.tokens, batch.enc, cross, batch.mask)  # (M, N)
    return distill_loss(logits, batch, options.kl_weight)


def train(
    net: DraftNet,
    train_set: Sequence[Example],
    val_set: Sequence[Example],
    encoders: EncoderCache,
    options: TrainOptions,
    log: Callable[[dict[str, Any]], None] = lambda row: print(json.dumps(row)),
    refresh: Callable[[], tuple[list[Example], list[Example]]] | None = None,
    on_eval: Callable[[DraftNet, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run options.steps AdamW steps; returns the last validation report.

    refresh: called at each validation pass for (train, val) examples, so training can start while
    the label stage is still adding sequences. on_eval: called after each validation pass (e.g. to
    write a checkpoint, so an interrupted run still leaves one). With options.feature, net is a
    FeatureDraftNet and the examples FeatureExamples.
    """
    if not train_set:
        raise ValueError("no training sequences: run the label stage (or check its filters)")
    rng = random.Random(options.seed)
    if options.device != "cpu":
        net.to_device(options.device)
    head_index = head_index_of(net.vocab_ids, net.embedding.shape[0])
    params = net.trainable_parameters()
    opt = torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay)

    def lr_at(step: int) -> float:
        if step < options.warmup:
            return options.lr * (step + 1) / options.warmup
        frac = (step - options.warmup) / max(1, options.steps - options.warmup)
        return options.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    val = list(val_set)[: options.max_val or None]
    crosses = CrossCache(net, encoders)

    def validate(examples: Sequence[Any]) -> dict[str, Any]:
        if not examples:
            return {}
        if options.feature:
            from specscribe.models.distill.feature_net import evaluate_features

            return evaluate_features(net, examples, encoders, crosses, unroll=options.unroll)
        return evaluate(net, examples, encoders, crosses=crosses)

    report = validate(val)
    log({"step": 0, "val": report})
    started, running = time.monotonic(), []
    net.train()
    for step in range(1, options.steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr_at(step - 1)
        chunk = rng.sample(list(train_set), min(options.batch_size, len(train_set)))
        loss, parts = example_loss(net, chunk, encoders, crosses, head_index, options)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        running.append((float(loss.detach()), parts["kl"], parts["ce"]))
        if step % options.eval_every == 0 or step == options.steps:
            mean = np.mean(running, axis=0)
            running = []
            if refresh is not None:
                train_set, val_set = refresh()
                val = list(val_set)[: options.max_val or None]
            report = validate(val)
            row = {"step": step, "loss": round(float(mean[0]), 4), "kl": round(float(mean[1]), 4)}
            row |= {"ce": round(float(mean[2]), 4), "lr": lr_at(step - 1), "seconds": round(time.monotonic() - started, 1)}
            log(row | {"train": len(train_set), "val_sequences": len(val), "val": report})
            if on_eval is not None:
                on_eval(net, report)
    return report


def train_from_folder(
    folder: Path | Sequence[Path],
    model: str,
    out: Path,
    options: TrainOptions,
    target: tuple[Any, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Load the target, the labels and the encoder cache of one or more dataset folders; train;
    export the draft to `out`. target: (TextDecoder, info) instead of loading `model` (tests)."""
    from specscribe.models.distill.export import export_draft, load_target_decoder

    folders = [Path(folder)] if isinstance(folder, (str, Path)) else [Path(f) for f in folder]
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    target, info = target if target is not None else load_target_decoder(model)
    torch.manual_seed(options.seed)
    sequences = [s for f in folders for s in read_labels(f)]
    train_seqs = [s for s in sequences if s.split == "train"]
    vocab_ids = None
    if options.vocab_size:
        vocab_ids = reduced_vocabulary(train_seqs, options.vocab_size, info["eot"], info["n_vocab"])
    from specscribe.models.distill.feature_net import FeatureDraftNet, load_feature_examples

    kind = FeatureDraftNet if options.feature else DraftNet
    if options.init:
        from specscribe.models.distill.export import checkpoint_sources, load_draft_into

        net = kind(target, checkpoint_sources(Path(options.init)), vocab_ids, options.freeze_cross_kv)
        load_draft_into(net, Path(options.init))
    else:
        net = kind(target, options.layers, vocab_ids, options.freeze_cross_kv)
    load = load_feature_examples if options.feature else load_examples
    encoders = EncoderCache(folders)
    loaded: dict[tuple[Path, str], Example] = {}

    def refresh() -> tuple[list[Example], list[Example]]:
        train_set, val_set = [], []
        for f in folders:
            seqs = read_labels(f)
            fresh = [s for s in seqs if (f, s.seq) not in loaded]
            loaded.update(zip(((f, s.seq) for s in fresh), load(f, fresh, info["eot"])))
            train_set += [loaded[f, s.seq] for s in seqs if s.split == "train"]
            val_set += [loaded[f, s.seq] for s in seqs if s.split == "val"]
        return train_set, val_set

    train_set, val_set = refresh()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_suffix(".train_log.jsonl")
    started = time.monotonic()

    best = {"acceptance": -1.0}

    def save(current: DraftNet, report: dict[str, Any]) -> None:
        """Export at each validation pass that is the best so far (no validation split: every pass)."""
        acceptance = report.get("acceptance", 0.0) if report else 0.0
        if acceptance < best["acceptance"]:
            return
        best["acceptance"] = acceptance
        summary = {"options": asdict(options), "val": report, "target": info["model"]}
        summary |= {"train_sequences": len(loaded), "minutes": round((time.monotonic() - started) / 60, 1)}
        export_draft(current, out, target, info["sha256"], summary)

    with open(log_path, "a") as fh:

        def log(row: dict[str, Any]) -> None:
            line = json.dumps(row)
            print(line, flush=True)
            fh.write(line + "\n")
            fh.flush()

        log({"options": asdict(options), "train": len(train_set), "val": len(val_set)})
        report = train(net, train_set, val_set, encoders, options, log, refresh if options.follow else None, save)
    return {
        "checkpoint": str(out), "log": str(log_path), "train_sequences": len(loaded),
        "best_val_acceptance": best["acceptance"], "val": report,
    }
