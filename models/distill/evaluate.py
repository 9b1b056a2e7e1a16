"""Evaluate a draft: validation acceptance (full and reduced heads) and the cost of one decoder
step, draft against target, measured side by side in one process."""

from __future__ import annotations

import statistics
import time
from typing import Any, Sequence

import torch

from specscribe.models.distill.net import DraftNet
from specscribe.models.distill.examples import EncoderCache, Example
from specscribe.models.distill.train import evaluate, reduced_vocabulary
from specscribe.models.whisper import TextDecoder


def step_ms(decoder: TextDecoder, enc: torch.Tensor, prompt: Sequence[int], steps: int = 30) -> list[float]:
    """ms of each of `steps` one-token decoder passes after `prompt` (the cache cropped back each time)."""
    session = decoder.session(enc)
    session.forward(list(prompt))
    times = []
    token = int(prompt[-1])
    for _ in range(steps):
        started = time.perf_counter()
        session.forward([token])
        times.append((time.perf_counter() - started) * 1000)
        session.crop(len(prompt))
    return times


def prepared(decoder: TextDecoder, compute_type: str) -> TextDecoder:
    from specscribe.models.compute import prepare_model

    return prepare_model(decoder, compute_type, "cpu").eval()


def step_costs(
    target: TextDecoder,
    net: DraftNet,
    enc: torch.Tensor,
    prompt: Sequence[int],
    vocab_ids: dict[int, torch.Tensor],
    compute_types: Sequence[str] = ("float32", "int8"),
    rounds: int = 3,
) -> dict[str, Any]:
    """{compute type: {target, draft, draft_vocab_N...: {min, median}}} ms per one-token step, the
    decoders interleaved round by round. On a busy machine the median includes time the process
    was not scheduled; the minimum is the better estimate of the cost itself."""
    out: dict[str, Any] = {}
    saved = net.vocab_ids
    for ct in compute_types:
        decoders = {"target": prepared(target, ct), "draft": prepared(net.text_decoder(target), ct)}
        for size, ids in vocab_ids.items():
            net.vocab_ids = ids
            decoders[f"draft_vocab_{size}"] = prepared(net.text_decoder(target), ct)
            net.vocab_ids = saved
        with torch.inference_mode():
            enc_ct = enc.float()
            samples: dict[str, list[float]] = {name: [] for name in decoders}
            for _ in range(rounds):
                for name, dec in decoders.items():
                    samples[name] += step_ms(dec, enc_ct, prompt)
        out[ct] = {
            name: {"min": round(min(v), 3), "median": round(statistics.median(v), 3)} for name, v in samples.items()
        }
    return out


def vocabulary_sweep(
    net: DraftNet,
    train_sequences: Sequence,
    val: Sequence[Example],
    encoders: EncoderCache,
    sizes: Sequence[int],
    first_special: int,
    n_vocab: int,
) -> tuple[dict[str, Any], dict[int, torch.Tensor]]:
    """Validation acceptance with the head restricted to the N most frequent label tokens (plus all
    specials), without retraining; returns ({"full"|N: report}, {N: vocab ids})."""
    saved = net.vocab_ids
    reports: dict[str, Any] = {"full": evaluate(net, val, encoders)}
    ids_by_size = {}
    for size in sizes:
        ids = reduced_vocabulary(train_sequences, size, first_special, n_vocab)
        ids_by_size[size] = ids
        net.vocab_ids = ids
        reports[str(size)] = evaluate(net, val, encoders)
    net.vocab_ids = saved
    return reports, ids_by_size
