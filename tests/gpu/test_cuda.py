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
