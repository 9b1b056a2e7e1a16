"""Batch invariance on the real model and real audio, bit for bit, per compute type.

A sequence's rows computed alone (the prompt, then one token per pass) must equal the same rows
inside one pass of 2, 8 or 32 parts, whose companions are other windows' sessions at random
lengths with random tokens. This is what makes drafting and batching lossless at every compute
type (models/invariant.py); tests/unit/test_invariant.py checks the same on a random model.
"""

from __future__ import annotations

import random

import pytest
import torch

pytestmark = pytest.mark.integration


def _compute_types() -> list[str]:
    from specscribe.models.compute import cpu_has_fast_bf16, int8_fast

    # bfloat16 runs (emulated, slowly) on any CPU; test it where `auto` would pick it. int8 (the decoder's
    # linears and head on row-scaled int8) wherever fbgemm runs it.
    return ["float32"] + (["bfloat16"] if cpu_has_fast_bf16() else []) + (["int8"] if int8_fast() else [])


@pytest.fixture(scope="module", params=_compute_types())
def engine(base_model_dir, request):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    return SpecEngine(base_model_dir, EngineOptions(model="base", compute_type=request.param, draft="none"))


@pytest.fixture(scope="module")
def encoded(engine, clips_dir):
    from specscribe.clips import evaluation_windows

    clips = evaluation_windows(clips_dir)
    return [engine.encode(clips[name]) for name in ("jfk", "0870", "multilingual-en", "multilingual-de")]


@pytest.mark.parametrize("parts", [2, 8, 32])
def test_a_sequence_alone_equals_the_sequence_among_random_companions(engine, encoded, parts):
    from specscribe.models.whisper import PassPart

    rng = random.Random(parts)
    tok = engine.tokenizer
    prompt = tok.sot_sequence("transcribe", "en")
    text = list(tok.encode(" And so my fellow Americans, ask not what your country can do for you"))
    alone = engine.session(encoded[0])
    want = [alone.forward(prompt)[-1]] + [alone.forward([t])[-1] for t in text]
    main = engine.session(encoded[0])
    batch = [PassPart(main, prompt + text, logits_from=len(prompt) - 1, prompt_rows=len(prompt))]
    for i in range(parts - 1):
        other = engine.session(encoded[1 + i % 3])
        if length := rng.randint(0, 60):
            other.forward(prompt + [rng.randrange(tok.eot) for _ in range(length)])
        batch.append(PassPart(other, [rng.randrange(tok.eot) for _ in range(rng.randint(1, 8))]))
    rng.shuffle(batch)
    got = engine.model.decoder.run_pass(batch)[[p.session for p in batch].index(main)].logits
    differing = [i for i, row in enumerate(want) if not torch.equal(got[i], row)]
    assert not differing, f"{engine.compute_type}: rows {differing} differ from the same rows computed alone"
