"""Compute type by hardware flags, and overrides."""

from __future__ import annotations

import pytest

from specscribe.models.compute import cpu_has_fast_bf16, resolve_compute_type


def test_auto_picks_by_cpu_flags():
    assert resolve_compute_type("auto", "cpu", {"avx512f", "amx_bf16", "amx_tile"}) == "bfloat16"
    assert resolve_compute_type("auto", "cpu", {"avx512f", "avx512_bf16"}) == "bfloat16"
    assert resolve_compute_type("auto", "cpu", {"avx2", "fma"}) == "int8_float32"
    assert resolve_compute_type("auto", "cuda", {"avx2"}) == "float16"


def test_override_and_bad_values():
    assert resolve_compute_type("float32", "cpu", {"amx_bf16"}) == "float32"
    assert resolve_compute_type("bfloat16", "cpu", {"avx2"}) == "bfloat16"
    with pytest.raises(ValueError, match="unknown compute type"):
        resolve_compute_type("int4", "cpu", set())
    with pytest.raises(ValueError, match="CPU only"):
        resolve_compute_type("int8", "cuda", set())


def test_fast_bf16_flags():
    assert cpu_has_fast_bf16({"amx_bf16"}) and not cpu_has_fast_bf16({"avx2", "avx512f"})


def test_few_row_linear_equals_linear_for_one_and_several_rows():
    import torch
    from torch import nn

    from specscribe.models.compute import FewRowLinear

    torch.manual_seed(0)
    for out in (16, 48, 9000):  # out < in (no transpose kept), a layer, a head-sized output
        linear = nn.Linear(32, out, bias=out < 100)
        fast = FewRowLinear.from_linear(linear)
        for shape in ((1, 1, 32), (1, 5, 32), (3, 32), (70, 32)):  # one, several, many rows
            x = torch.randn(*shape)
            torch.testing.assert_close(fast(x), linear(x), atol=1e-5, rtol=1e-5)
        assert fast.weight is linear.weight  # shared, so a tied head stays tied
        assert (fast.weight_t is None) == (out < 32)
    # several rows give each row what a one-row pass gives (what speculative verification needs)
    x = torch.randn(6, 32)
    rows = torch.cat([fast(x[i : i + 1]) for i in range(6)])
    torch.testing.assert_close(fast(x), rows, atol=1e-5, rtol=1e-5)


def test_speed_up_cpu_decoder_keeps_the_outputs_and_the_tied_head():
    import copy

    import torch
    from torch import nn

    from specscribe.models.compute import FewRowLinear, speed_up_cpu_decoder
    from specscribe.models.weights import WhisperDims
    from specscribe.models.whisper import WhisperModel

    torch.manual_seed(0)
    dims = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
                       n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=2)  # fmt: skip
    model = WhisperModel(dims).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    plain = copy.deepcopy(model.decoder)
    fast = speed_up_cpu_decoder(model.decoder)
    assert isinstance(fast.proj, FewRowLinear) and fast.proj.weight is fast.token_embedding.weight
    assert not any(type(m) is nn.Linear for m in fast.modules())
    enc = torch.randn(1, 6, 16)
    want = plain.session(enc).forward([1, 2, 3, 4])
    got = fast.session(enc).forward([1, 2, 3, 4])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
