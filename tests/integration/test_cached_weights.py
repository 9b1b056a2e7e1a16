"""The converted-weight cache on the real base model: a model mapped from the cache gives bitwise
the encoder output and decoder logits of a model converted from model.bin, in float32, bfloat16 and
int8_float32 (whose int8 encoder linears come from a file of their own); the spec engine loads through the
cache and still loads the shipped draft."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def inputs(base_model_dir, clips_dir):
    from faster_whisper.feature_extractor import FeatureExtractor

    from specscribe.models.tokenizer import WhisperTokenizer
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    audio = load_audio(clips_dir / "jfk.flac")[: 10 * SAMPLE_RATE]
    mel = torch.from_numpy(FeatureExtractor(feature_size=80)(audio)[:, :1000]).unsqueeze(0)  # (1, 80, 1000)
    tok = WhisperTokenizer.from_folder(base_model_dir, True)
    tokens = tok.sot_sequence("transcribe", "en") + [tok.no_timestamps] + tok.encode(" And so my fellow Americans")
    return mel, tokens


def _outputs(model, mel, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    enc = model.encode(mel)  # (1, 500, 512)
    return enc, model.decoder.session(enc).forward(tokens)  # (T, 51865) float32


@pytest.mark.parametrize("compute_type", ["float32", "bfloat16", "int8_float32"])
def test_cached_model_is_bitwise_the_converted_one(base_model_dir, inputs, tmp_path, compute_type):
    from specscribe.models.compute import prepare_model
    from specscribe.models.weight_cache import load_whisper_model
    from specscribe.models.weights import read_model_bin
    from specscribe.models.whisper import WhisperModel

    mel, tokens = inputs
    plain = prepare_model(WhisperModel.from_ct2(read_model_bin(base_model_dir / "model.bin")), compute_type, "cpu")
    want = _outputs(plain, mel, tokens)
    del plain
    load_whisper_model(base_model_dir, compute_type, "cpu", "base", cache_dir=tmp_path)  # writes the cache
    files = {"int8_float32": ["base-float32.safetensors", "base-int8_float32.safetensors"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == files.get(compute_type, [f"base-{compute_type}.safetensors"])
    model, dims = load_whisper_model(base_model_dir, compute_type, "cpu", "base", cache_dir=tmp_path)  # maps it
    assert (dims.n_mels, dims.n_vocab, dims.n_text_layer) == (80, 51865, 6)
    assert model.decoder.proj.weight is model.decoder.token_embedding.weight
    assert model.decoder.token_embedding.weight.dtype == getattr(torch, compute_type.replace("int8_", ""))
    got = _outputs(model, mel, tokens)
    assert torch.equal(got[0], want[0]), "encoder output differs"
    assert torch.equal(got[1], want[1]), "decoder logits differ"


def test_engine_loads_through_the_cache_with_its_draft(base_model_dir, tmp_path, monkeypatch):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    monkeypatch.setenv("SPECSCRIBE_HOME", str(tmp_path))  # the cache only; the model folder is resolved
    for _ in range(2):  # writes the cache, then maps it
        engine = SpecEngine(base_model_dir, EngineOptions(model="base", compute_type="bfloat16", draft="auto"))
        assert engine.draft is not None  # the shipped draft checks the target's sha256
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["base-bfloat16.safetensors"]
