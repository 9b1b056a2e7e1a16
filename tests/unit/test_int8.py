"""Row-scaled int8 encoder linears (models/int8.py): each row quantized on its own scale."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from specscribe.models.compute import int8_supported
from specscribe.models.int8 import RowInt8Linear, quantize_encoder

pytestmark = pytest.mark.skipif(not int8_supported(), reason="torch has no quantized engine here")


def linear(n_in: int = 64, n_out: int = 48, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm()).item()


def test_a_rows_result_does_not_depend_on_the_other_rows():
    lin = linear()
    q = RowInt8Linear.from_linear(lin)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(9, 64, generator=gen) * torch.logspace(-3, 3, 9).unsqueeze(1)  # rows 1e-3 ... 1e3 loud
    with torch.inference_mode():
        together = q(x)
        for r in range(9):
            companions = torch.randn(5, 64, generator=gen) * 50
            alone, mixed = q(x[r : r + 1]), q(torch.cat([companions[:2], x[r : r + 1], companions[2:]]))
            assert torch.equal(alone[0], together[r]) and torch.equal(mixed[2], together[r])


def test_a_quiet_row_beside_a_loud_one_keeps_its_precision():
    """The reason for the module: one scale per tensor lets the loudest row set the step for all."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    lin = linear()
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(2))
    x[1] *= 1000  # a loud frame beside a quiet one
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        per_tensor = quantize_dynamic(nn.Sequential(linear()), {nn.Linear: per_channel_dynamic_qconfig},
                                      dtype=torch.qint8)
    with torch.inference_mode():
        want = lin(x)
        rows = RowInt8Linear.from_linear(lin)(x)
        tensor = per_tensor(x)
    assert relative_error(rows[0], want[0]) < 0.02  # the quiet row, on its own scale
    assert relative_error(tensor[0], want[0]) > 0.2  # on the loud row's scale: mostly rounding
    assert relative_error(rows[1], want[1]) < 0.02


def test_shapes_bias_and_a_silent_row():
    lin = linear(32, 16)
    q = RowInt8Linear.from_linear(lin)
    x = torch.randn(1, 5, 32)
    x[0, 3] = 0  # a row of zeros: the bias, not NaN
    with torch.inference_mode():
        y = q(x)
        assert y.shape == (1, 5, 16)
        assert torch.equal(y[0, 3], lin.bias.detach())
        assert relative_error(y, lin(x)) < 0.03
    no_bias = nn.Linear(32, 16, bias=False)
    with torch.inference_mode():
        assert relative_error(RowInt8Linear.from_linear(no_bias)(x), no_bias(x)) < 0.03


def test_no_int16_pair_saturates_even_where_neighbouring_weights_are_all_at_their_maximum():
    """fbgemm's AVX2 kernel sums u8 x s8 pairs in int16: 8-bit weights at their maximum beside activations
    near the row's maximum would saturate (the module docstring); 7-bit weights cannot."""
    lin = nn.Linear(256, 8, bias=False)
    with torch.no_grad():
        lin.weight.fill_(0.5)
        lin.weight[:, 1::2] = 0.49  # not all equal, so quantization is not exact by chance
    x = torch.full((3, 256), 1.0)
    x[1] = -1.0
    x[2, ::2] = 0.0
    with torch.inference_mode():
        assert relative_error(RowInt8Linear.from_linear(lin)(x), lin(x)) < 0.01


def test_quantize_encoder_swaps_every_linear():
    from specscribe.models.encoder import AudioEncoder
    from specscribe.models.weights import WhisperDims

    dims = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=2,
                       n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=1)  # fmt: skip
    torch.manual_seed(3)
    encoder = AudioEncoder(dims).eval()
    mel = torch.randn(1, 8, 12)
    with torch.inference_mode():
        want = encoder(mel)
        quantize_encoder(encoder)
        got = encoder(mel)
    assert not any(type(m) is nn.Linear for m in encoder.modules())
    assert sum(type(m) is RowInt8Linear for m in encoder.modules()) == 2 * 4  # qkv, out, fc1, fc2 per layer
    assert relative_error(got, want) < 0.05


def test_int8_quantizes_the_decoder_and_int8_float32_leaves_it_float32():
    from specscribe.models.compute import decoder_dtype, prepare_model
    from specscribe.models.weights import WhisperDims
    from specscribe.models.whisper import WhisperModel

    dims = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
                       n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=2)  # fmt: skip

    def model(compute_type: str) -> nn.Module:
        torch.manual_seed(4)
        return prepare_model(WhisperModel(dims).eval(), compute_type, "cpu")

    plain, full, encoder_only = model("float32"), model("int8"), model("int8_float32")
    assert not any(type(m) is nn.Linear for m in full.decoder.layers.modules())
    assert type(full.decoder.proj) is RowInt8Linear
    assert full.decoder.token_embedding.weight.dtype == torch.float32  # the head's int8 copy is its own
    assert type(encoder_only.decoder.proj) is nn.Linear
    assert any(type(m) is nn.Linear for m in encoder_only.decoder.layers.modules())
    assert (decoder_dtype("int8_float32"), decoder_dtype("int8")) == ("float32", "int8")  # what the tests rely on
    enc = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        want = plain.decoder.session(enc).forward([1, 2, 3, 4])
        got = full.decoder.session(enc).forward([1, 2, 3, 4])
    assert relative_error(got, want) < 0.05


def test_a_drafts_int8_linears_give_torch_dynamic_int8_bit_for_bit():
    """DynamicInt8Linear (one prepack) computes what torch.ao's quantize_dynamic module computed, bitwise:
    drafts quantized either way propose the same tokens."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from specscribe.models.compute import prepare_model
    from specscribe.models.int8 import DynamicInt8Linear

    torch.manual_seed(6)
    layers = nn.ModuleList([nn.Linear(64, 96), nn.Linear(96, 64, bias=False), nn.Linear(64, 300)]).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = quantize_dynamic(copy.deepcopy(layers), {nn.Linear: per_channel_dynamic_qconfig},
                                     dtype=torch.qint8)
    ours = prepare_model(copy.deepcopy(layers), "int8_float32", "cpu")
    assert all(type(m) is DynamicInt8Linear for m in ours)
    loudness = torch.tensor([0.01, 1.0, 30.0, 1.0, 0.2, 3.0])[:, None]  # (6, 1): rows of mixed loudness
    with torch.inference_mode():
        for mine, theirs in zip(ours, reference):
            x = (torch.randn(6, mine.in_features) * loudness).reshape(2, 3, mine.in_features)  # (2, 3, in)
            assert torch.equal(mine(x), theirs(x))
