"""The CUDA path of the spec engine (float16): skipped without a GPU (tests/conftest.py).

- `auto` picks float16 on CUDA;
- speculative decoding with the shipped draft decoder gives exactly the tokens of `--draft none`
  on the same engine (the verify pass is row-independent in float16 as well);
- the text is right, and a shortened encoder window (streaming) works on the GPU too.
"""

from __future__ import annotations

import pytest

from specscribe.models.types import DecodeRequest

pytestmark = [pytest.mark.cuda, pytest.mark.integration]


@pytest.fixture(scope="module")
def engines(base_model_dir):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    def make(draft: str) -> SpecEngine:
        return SpecEngine(base_model_dir, EngineOptions(engine="spec", model="base", device="cuda", draft=draft))

    return make("auto"), make("none")


def test_auto_is_float16_on_cuda(engines):
    with_draft, _ = engines
    assert with_draft.compute_type == "float16"
    assert next(with_draft.model.parameters()).is_cuda


@pytest.mark.parametrize("name", ["jfk", "0870", "multilingual-de"])
def test_speculation_is_lossless_on_cuda(engines, clips_dir, name):
    from specscribe.clips import evaluation_windows

    with_draft, plain = engines
    audio = evaluation_windows(clips_dir)[name]
    request = DecodeRequest(task="transcribe", language="de" if name.endswith("-de") else "en")
    got = with_draft.decode(with_draft.encode(audio), request)
    want = plain.decode(plain.encode(audio), request)
    assert got.tokens == want.tokens
    assert got.stats.target_passes <= want.stats.target_passes


def test_jfk_text_and_short_window_on_cuda(engines, clips_dir):
    import jiwer

    from specscribe.clips import JFK_TEXT, evaluation_windows
    from specscribe.pipeline.wer import normalize

    engine, _ = engines
    audio = evaluation_windows(clips_dir)["jfk"]
    encoded = engine.encode(audio, window=len(audio) / 16000 + 5.0)
    assert encoded.handle.shape[1] == 800  # 16 s of encoder input: 800 positions, not 1500
    text = engine.decode(encoded, DecodeRequest(language="en")).text
    assert jiwer.wer(normalize(JFK_TEXT), normalize(text)) < 0.1


@pytest.mark.parametrize("best_of", [1, 2])
def test_seeded_sampling_runs_on_cuda_and_repeats(engines, clips_dir, best_of):
    """Temperature fallbacks and best-of sample with seeded CPU generators; a CUDA row is sampled on the CPU
    (a CPU generator cannot draw from a CUDA tensor), so a seed gives the same text twice."""
    from specscribe.clips import evaluation_windows

    engine, _ = engines
    encoded = engine.encode(evaluation_windows(clips_dir)["jfk"])
    request = DecodeRequest(language="en", temperature=0.4, seed=7, best_of=best_of)
    first, again = (engine.decode(encoded, request) for _ in range(2))
    assert first.tokens and first.tokens == again.tokens


@pytest.mark.parametrize("compute_type", ["float16", "bfloat16"])
def test_rows_are_batch_invariant_on_cuda(base_model_dir, clips_dir, compute_type):
    """A sequence alone equals the same sequence among 7 random companions in one pass, bit for bit
    (tests/integration/test_row_invariance.py on the GPU), and batched decodes equal lone ones."""
    import random

    import torch

    from specscribe.clips import evaluation_windows
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine
    from specscribe.models.whisper import PassPart

    engine = SpecEngine(base_model_dir, EngineOptions(model="base", device="cuda", compute_type=compute_type, draft="none"))
    clips = evaluation_windows(clips_dir)
    encoded = [engine.encode(clips[n]) for n in ("jfk", "0870", "multilingual-de")]
    tok, rng = engine.tokenizer, random.Random(0)
    prompt = tok.sot_sequence("transcribe", "en")
    text = list(tok.encode(" And so my fellow Americans, ask not what your country can do for you"))
    alone = engine.session(encoded[0])
    want = [alone.forward(prompt)[-1]] + [alone.forward([t])[-1] for t in text]
    main = engine.session(encoded[0])
    parts = [PassPart(main, prompt + text, logits_from=len(prompt) - 1, prompt_rows=len(prompt))]
    for i in range(7):
        other = engine.session(encoded[1 + i % 2])
        other.forward(prompt + [rng.randrange(tok.eot) for _ in range(rng.randint(0, 40))])
        parts.append(PassPart(other, [rng.randrange(tok.eot) for _ in range(rng.randint(1, 6))]))
    got = engine.model.decoder.run_pass(parts)[0].logits
    assert all(torch.equal(got[i], row) for i, row in enumerate(want))
    items = [(e, DecodeRequest(language="en")) for e in encoded]
    assert [r.tokens for r in engine.decode_many(items)] == [engine.decode(e, r).tokens for e, r in items]
