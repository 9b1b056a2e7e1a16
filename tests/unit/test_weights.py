"""The model.bin reader on small files the tests write themselves (no real weights)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from specscribe.models.errors import ModelError
from specscribe.models.weights import WhisperDims, read_model_bin
from specscribe.models.whisper import WhisperModel

DTYPE_IDS = {np.float32: 0, np.int8: 1, np.int16: 2, np.int32: 3, np.float16: 4}


def write_model_bin(path: Path, variables: dict, aliases: dict | None = None, spec: str = "WhisperSpec", version: int = 6) -> None:
    """A model.bin as ctranslate2's ModelSpec._serialize writes it."""

    def string(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = [struct.pack("<I", version), string(spec), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, value in variables.items():
        value = np.asarray(value)
        out.append(string(name) + struct.pack("<B", value.ndim) + struct.pack(f"<{value.ndim}I", *value.shape))
        out.append(struct.pack("<BI", DTYPE_IDS[value.dtype.type], value.nbytes) + value.tobytes())
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out.append(string(alias) + string(target))
    path.write_bytes(b"".join(out))


def test_dtypes_scale_alias_scalar(tmp_path):
    rng = np.random.default_rng(0)
    w32 = rng.standard_normal((3, 4)).astype(np.float32)
    w16 = rng.standard_normal((5,)).astype(np.float16)
    q = rng.integers(-127, 128, size=(2, 3)).astype(np.int8)
    scale = np.array([2.0, 0.5], dtype=np.float32)
    write_model_bin(
        tmp_path / "model.bin",
        {
            "a/weight": w32,
            "b/bias": w16,
            "c/weight": q,
            "c/weight_scale": scale,
            "num_heads": np.array(7, dtype=np.int16),
        },
        aliases={"d/weight": "c/weight", "e/weight": "a/weight"},
    )
    m = read_model_bin(tmp_path / "model.bin")
    assert (m.spec, m.revision, m.binary_version) == ("WhisperSpec", 3, 6)
    assert torch.equal(m.float("a/weight"), torch.from_numpy(w32))
    assert m.raw("b/bias").dtype == torch.float16
    assert torch.equal(m.float("b/bias"), torch.from_numpy(w16.astype(np.float32)))
    expected = q.astype(np.float32) / scale[:, None]
    assert torch.allclose(m.float("c/weight"), torch.from_numpy(expected))
    assert torch.allclose(m.float("d/weight"), torch.from_numpy(expected))  # alias keeps its scale
    assert torch.equal(m.float("e/weight"), torch.from_numpy(w32))
    assert m.scalar("num_heads") == 7


def test_not_a_model_bin(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"this is not a model file at all")
    with pytest.raises(ModelError, match="not a CTranslate2"):
        read_model_bin(bad)
    with pytest.raises(ModelError, match="cannot read"):
        read_model_bin(tmp_path / "missing.bin")


def test_truncated_file(tmp_path):
    path = tmp_path / "model.bin"
    write_model_bin(path, {"a/weight": np.ones((64, 64), np.float32)})
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ModelError, match="truncated"):
        read_model_bin(path)


def test_other_spec_is_refused(tmp_path):
    path = tmp_path / "model.bin"
    write_model_bin(path, {"encoder/conv1/weight": np.ones((4, 2, 3), np.float32)}, spec="TransformerSpec")
    with pytest.raises(ModelError, match="TransformerSpec"):
        WhisperDims.from_model(read_model_bin(path))


def tiny_whisper_variables(n_mels=6, d=8, heads=2, enc_layers=2, dec_layers=1, vocab=30, n_text_ctx=12, n_audio_ctx=10, quantize=False):
    """Random WhisperSpec variables with the real names (float16 storage, optional int8 linears)."""
    rng = np.random.default_rng(1)

    def arr(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float16)

    v: dict = {}

    def linear(name, n_out, n_in):
        w = arr(n_out, n_in).astype(np.float32)
        if quantize:
            scale = 127.0 / np.abs(w).max(axis=1)
            v[name + "/weight"] = np.round(w * scale[:, None]).astype(np.int8)
            v[name + "/weight_scale"] = scale.astype(np.float32)
        else:
            v[name + "/weight"] = w.astype(np.float16)
        v[name + "/bias"] = arr(n_out)

    def norm(name):
        v[name + "/gamma"] = (1 + arr(d)).astype(np.float16)
        v[name + "/beta"] = arr(d)

    v["encoder/conv1/weight"], v["encoder/conv1/bias"] = arr(d, n_mels, 3), arr(d)
    v["encoder/conv2/weight"], v["encoder/conv2/bias"] = arr(d, d, 3), arr(d)
    v["encoder/position_encodings/encodings"] = arr(n_audio_ctx, d)
    v["encoder/num_heads"] = np.array(heads, dtype=np.int16)
    for i in range(enc_layers):
        s = f"encoder/layer_{i}/"
        norm(s + "self_attention/layer_norm")
        linear(s + "self_attention/linear_0", 3 * d, d)
        linear(s + "self_attention/linear_1", d, d)
        norm(s + "ffn/layer_norm")
        linear(s + "ffn/linear_0", 4 * d, d)
        linear(s + "ffn/linear_1", d, 4 * d)
    norm("encoder/layer_norm")
    v["decoder/embeddings/weight"] = arr(vocab, d)
    v["decoder/position_encodings/encodings"] = arr(n_text_ctx, d)
    v["decoder/num_heads"] = np.array(heads, dtype=np.int16)
    for i in range(dec_layers):
        s = f"decoder/layer_{i}/"
        norm(s + "self_attention/layer_norm")
        linear(s + "self_attention/linear_0", 3 * d, d)
        linear(s + "self_attention/linear_1", d, d)
        norm(s + "attention/layer_norm")
        linear(s + "attention/linear_0", d, d)
        linear(s + "attention/linear_1", 2 * d, d)
        linear(s + "attention/linear_2", d, d)
        norm(s + "ffn/layer_norm")
        linear(s + "ffn/linear_0", 4 * d, d)
        linear(s + "ffn/linear_1", d, 4 * d)
    norm("decoder/layer_norm")
    return v


@pytest.mark.parametrize("quantize", [False, True])
def test_whisper_dims_and_model_from_weights(tmp_path, quantize):
    path = tmp_path / "model.bin"
    write_model_bin(
        path,
        tiny_whisper_variables(quantize=quantize),
        aliases={"decoder/projection/weight": "decoder/embeddings/weight"},
    )
    ct2 = read_model_bin(path)
    dims = WhisperDims.from_model(ct2)
    assert dims == WhisperDims(6, 10, 8, 2, 2, 30, 12, 8, 2, 1)
    model = WhisperModel.from_ct2(ct2)
    mel = torch.randn(1, 6, 20)
    enc = model.encode(mel)
    assert enc.shape == (1, 10, 8)
    logits = model.session(enc).forward([1, 2, 3])
    assert logits.shape == (3, 30) and torch.isfinite(logits).all()
    # tied projection: the output head is the embedding
    assert model.decoder.proj.weight.data_ptr() == model.decoder.token_embedding.weight.data_ptr()
    expected = ct2.float("encoder/layer_0/ffn/linear_0/weight")
    assert torch.equal(model.encoder.layers[0].mlp.fc1.weight, expected)
