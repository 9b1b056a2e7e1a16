"""KV cache: T tokens in one pass equal T single steps; crop then re-feed equals a fresh session."""

from __future__ import annotations

import pytest
import torch

from specscribe.models.kv_cache import CrossKVCache, KVCache
from specscribe.models.weights import WhisperDims
from specscribe.models.whisper import WhisperModel

DIMS = WhisperDims(n_mels=6, n_audio_ctx=10, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
                   n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=2)
TOKENS = [3, 17, 5, 9, 30, 2, 11]


@pytest.fixture(scope="module")
def model_and_enc():
    torch.manual_seed(0)
    model = WhisperModel(DIMS).eval()
    with torch.no_grad():
        model.decoder.positional_embedding.normal_(0, 0.5)
        model.encoder.positional_embedding.normal_(0, 0.5)
    enc = model.encode(torch.randn(1, 6, 20))
    return model, enc


def test_one_pass_equals_single_steps(model_and_enc):
    model, enc = model_and_enc
    batch = model.session(enc).forward(TOKENS)  # (T, V)
    single = model.session(enc)
    steps = torch.cat([single.forward([t]) for t in TOKENS])
    assert batch.shape == steps.shape == (len(TOKENS), DIMS.n_vocab)
    torch.testing.assert_close(batch, steps, rtol=1e-5, atol=1e-5)
    assert single.length == len(TOKENS)


def test_crop_then_refeed_equals_fresh(model_and_enc):
    model, enc = model_and_enc
    fresh = model.session(enc).forward(TOKENS[:3] + [21, 22])
    session = model.session(enc)
    session.forward(TOKENS)  # 7 tokens, then roll back 4 of them
    session.crop(3)
    assert session.length == 3
    again = session.forward([21, 22])
    torch.testing.assert_close(again, fresh[3:], rtol=1e-5, atol=1e-5)


def test_logits_from_skips_the_head_for_early_rows_only(model_and_enc):
    model, enc = model_and_enc
    full = model.session(enc).forward(TOKENS)  # (T, V)
    session = model.session(enc)
    tail = session.forward(TOKENS, logits_from=5)  # (T - 5, V)
    assert tail.shape == (len(TOKENS) - 5, DIMS.n_vocab) and session.length == len(TOKENS)
    torch.testing.assert_close(tail, full[5:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(session.forward([21]), model.session(enc).forward(TOKENS + [21])[-1:], rtol=1e-5, atol=1e-5)
    none, scores = model.session(enc).forward(TOKENS, return_cross_attention=True, logits_from=len(TOKENS))
    assert none.shape == (0, DIMS.n_vocab) and scores.shape[2] == len(TOKENS)


def test_cross_attention_scores(model_and_enc):
    model, enc = model_and_enc
    plain = model.session(enc).forward(TOKENS[:4])
    logits, scores = model.session(enc).forward(TOKENS[:4], return_cross_attention=True)
    torch.testing.assert_close(logits, plain, rtol=1e-5, atol=1e-5)
    assert scores.shape == (DIMS.n_text_layer, DIMS.n_text_head, 4, DIMS.n_audio_ctx)


def test_cache_limits():
    cache = KVCache(n_layers=1, n_heads=1, head_dim=2, max_len=4)
    k = torch.ones(3, 1, 2)  # (T, H, Dh)
    keys, values = cache.write(0, k, 2 * k)
    assert keys.shape == (1, 1, 3, 2) and values[0, 0, 2].tolist() == [2.0, 2.0]
    cache.advance(3)
    with pytest.raises(ValueError, match="full"):
        cache.write(0, k, k)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(5)
    cache.crop(1)
    keys, _ = cache.write(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
    assert keys.shape[2] == 2 and keys[0, 0, 1].sum() == 0 and keys[0, 0, 0].sum() == 2
    full, _ = cache.write(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2), full=True)
    assert full.shape == (1, 1, 4, 2)  # the whole capacity, for a masked batch-invariant pass
    assert torch.isfinite(KVCache(1, 1, 2, 4).keys[0]).all()  # never-written keys are finite (zeros)


def test_context_overflow_is_an_error(model_and_enc):
    model, enc = model_and_enc
    session = model.session(enc)
    session.forward(list(range(DIMS.n_text_ctx)))
    with pytest.raises(ValueError, match="context full"):
        session.forward([1])


def test_cross_cache_computes_once_per_window_in_use():
    cache, calls = CrossKVCache(size=3), []

    def compute(enc):
        return lambda: calls.append(enc) or [enc * 2]

    a, b = torch.ones(1, 4, 2), torch.zeros(1, 4, 2)
    first, computed = cache.get(a, compute(a))
    assert computed and torch.equal(first[0], a * 2)
    cache.get(b, compute(b))
    again, computed = cache.get(a, compute(a))  # another window came between: still found
    assert not computed and again is first and len(calls) == 2


def test_cross_cache_entries_go_with_their_window_and_beyond_its_size():
    cache = CrossKVCache(size=2)
    windows = [torch.full((1, 3, 2), float(i)) for i in range(3)]
    for w in windows:
        cache.get(w, lambda: ["kv"])
    assert len(cache) == 2  # the least recently used went
    _, computed = cache.get(windows[0], lambda: ["kv"])
    assert computed  # it had gone, so it is computed again
    del windows[0]
    assert len(cache) == 1  # a freed window's entry goes at once
    fresh = torch.zeros(1, 3, 2)  # may reuse a freed tensor's id: never served another window's K/V
    value, computed = cache.get(fresh, lambda: ["new"])
    assert computed and value == ["new"]
