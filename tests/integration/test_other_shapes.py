"""A model of another shape than base, built with CTranslate2's own WhisperSpec (random weights): 128 mels as
large-v3, 2 decoder layers as distil-large-v3, and no preprocessor_config.json (a conversion made without
`--copy_files`). Both engines load it from its folder, read its shape from the weights, and decode the same
tokens in float32."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mels128_model(tmp_path_factory, base_model_dir):
    from ctranslate2.specs import whisper_spec

    rng = np.random.default_rng(0)
    n_mels, d, heads, vocab = 128, 32, 2, 51865

    def arr(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def linear(layer, n_out, n_in):
        layer.weight, layer.bias = arr(n_out, n_in), arr(n_out)

    def norm(layer):
        layer.gamma, layer.beta = 1 + arr(d), arr(d)

    def self_attention_and_ffn(layer):
        norm(layer.self_attention.layer_norm)
        linear(layer.self_attention.linear[0], 3 * d, d)
        linear(layer.self_attention.linear[1], d, d)
        norm(layer.ffn.layer_norm)
        linear(layer.ffn.linear_0, 4 * d, d)
        linear(layer.ffn.linear_1, d, 4 * d)

    spec = whisper_spec.WhisperSpec(1, heads, 2, heads)
    enc, dec = spec.encoder, spec.decoder
    enc.conv1.weight, enc.conv1.bias = arr(d, n_mels, 3), arr(d)
    enc.conv2.weight, enc.conv2.bias = arr(d, d, 3), arr(d)
    enc.position_encodings.encodings = arr(1500, d)
    norm(enc.layer_norm)
    for layer in enc.layer:
        self_attention_and_ffn(layer)
    dec.embeddings.weight = dec.projection.weight = arr(vocab, d)
    dec.position_encodings.encodings = arr(448, d)
    norm(dec.layer_norm)
    for layer in dec.layer:
        self_attention_and_ffn(layer)
        norm(layer.attention.layer_norm)
        linear(layer.attention.linear[0], d, d)
        linear(layer.attention.linear[1], 2 * d, d)
        linear(layer.attention.linear[2], d, d)
    config = json.loads((base_model_dir / "config.json").read_text())
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        setattr(spec.config, key, config[key])
    spec.config.alignment_heads = [[1, 0], [1, 1]]
    tokenizer = json.loads((base_model_dir / "tokenizer.json").read_text())
    tokens = [None] * vocab
    for token, i in tokenizer["model"]["vocab"].items():
        tokens[i] = token
    for added in tokenizer["added_tokens"]:
        tokens[added["id"]] = added["content"]
    spec.register_vocabulary(tokens)
    spec.validate()
    spec.optimize(quantization="float32")
    folder = tmp_path_factory.mktemp("mels128") / "model"
    folder.mkdir()
    spec.save(str(folder))
    shutil.copy(base_model_dir / "tokenizer.json", folder / "tokenizer.json")
    assert not (folder / "preprocessor_config.json").exists()
    return folder


def test_both_engines_read_the_shape_from_the_weights_and_agree(mels128_model, tmp_path, monkeypatch):
    from specscribe.models.engines import EngineOptions, load_transcriber

    monkeypatch.setenv("SPECSCRIBE_HOME", str(tmp_path))  # the spec engine's weight cache
    audio = (np.random.default_rng(1).standard_normal(16000 * 5) * 0.1).astype(np.float32)
    tokens = {}
    for engine in ("spec", "ct2"):
        transcriber = load_transcriber(EngineOptions(engine=engine, model=str(mels128_model), compute_type="float32",
                                                     draft="none", threads=1))
        encoded = transcriber.encode(audio)
        result = transcriber.decode(encoded, DecodeRequest(language="en", max_new_tokens=24))
        tokens[engine] = result.tokens
    assert len(tokens["spec"]) == 24 and tokens["spec"] == tokens["ct2"]
