"""The measured drafting policy (--draft auto, the default) on the real base model and real clips, at
the compute type `auto` picks here: whichever arm it plays (the shipped draft, n-gram lookup, the
previous hypothesis, none), the tokens are the plain decode's, and every arm's speed is measured."""

from __future__ import annotations

import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(base_model_dir):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    return SpecEngine(base_model_dir, EngineOptions(engine="spec", model="base"))  # auto, measured: the defaults


@pytest.fixture(scope="module")
def windows(clips_dir):
    from specscribe.clips import evaluation_windows

    return evaluation_windows(clips_dir)


def test_every_arm_gives_the_plain_tokens(engine, windows):
    assert engine.policy is not None and engine.draft is not None
    audio = windows["0880"]
    encoded = engine.encode(audio)
    shorter = engine.encode(audio[: len(audio) - 16000])
    request = DecodeRequest(task="transcribe", language="en", timestamps=True)
    first = [engine.decode(encoded, request) for _ in range(3)]  # untried arms come first: one each
    hypothesis = engine.decode(shorter, request).tokens
    redecode = DecodeRequest(task="transcribe", language="en", timestamps=True, hypothesis_tokens=hypothesis)
    again = [engine.decode(encoded, redecode) for _ in range(3)]
    plain = first[2]  # the third arm of a first decode is "none"
    assert plain.stats.drafted == 0 and again[2].stats.drafted == 0
    for result in first + again:
        assert result.tokens == plain.tokens and result.text == plain.text
        assert 0 < result.stats.prefill_ms < result.stats.verify_ms
    assert first[0].stats.accepted > 0  # the shipped draft
    assert again[0].stats.accepted > 0 and again[1].stats.accepted > 0  # the hypothesis, both chains
    summary = engine.policy.summary()
    assert set(summary["en-transcribe/first/alone"]) == {"decoder", "ngram", "none"}
    assert set(summary["en-transcribe/redecode/alone"]) == {"hypothesis+ngram", "hypothesis+decoder", "none"}
    for table in summary.values():
        assert all(arm["decodes"] >= 1 and arm["tokens_per_ms"] > 0 for arm in table.values())


def test_decodes_sharing_passes_learn_in_their_own_context(engine, windows):
    request = DecodeRequest(task="transcribe", language="en", timestamps=True)
    items = [(engine.encode(windows[name]), request) for name in ("jfk", "0930")]
    together = engine.decode_many(items)
    alone = [engine.decode(enc, req) for enc, req in items]
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    assert "en-transcribe/first/shared" in engine.policy.summary()
