"""Compute type by hardware flags, and overrides."""

from __future__ import annotations

import pytest

from specscribe.models.compute import (cpu_has_fast_bf16, int8_fast, pass_rows_for, query_block_for,
                                       resolve_compute_type, set_threads)


def test_auto_picks_by_cpu_flags():
    assert resolve_compute_type("auto", "cpu", {"avx512f", "amx_bf16", "amx_tile"}) == "bfloat16"
    assert resolve_compute_type("auto", "cpu", {"avx512f", "avx512_bf16"}) == "bfloat16"
    # without fast bf16: the row-scaled int8 encoder where fbgemm runs it (x86), else float32 (models/compute.py)
    assert resolve_compute_type("auto", "cpu", {"avx2", "fma"}) == ("int8_float32" if int8_fast() else "float32")
    assert resolve_compute_type("auto", "cuda", {"avx2"}) == "float16"


def test_auto_leaves_int8_to_cpus_fbgemm_runs_on(monkeypatch):
    """fbgemm is in every x86 torch but refuses a CPU without AVX2 (an old Xeon, QEMU's qemu64): auto is float32
    there, not an int8 that fails at load."""
    import torch

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("not an x86 build of torch")
    for capability, want in (("AVX2", "int8_float32"), ("AVX512", "int8_float32"), ("DEFAULT", "float32"),
                             ("NO AVX", "float32")):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert resolve_compute_type("auto", "cpu", {"sse4_2"}) == want


def test_a_device_or_compute_type_this_machine_cannot_run_is_a_model_error(base_model_dir):
    """--device cuda without a GPU, int8 on CUDA: one line from the CLI (ModelError), not a traceback."""
    import torch

    from specscribe.models.engines import EngineOptions
    from specscribe.models.errors import ModelError
    from specscribe.models.spec_engine import SpecEngine

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(ModelError, match="no CUDA GPU"):
        SpecEngine(base_model_dir, EngineOptions(device="cuda"))
    with pytest.raises(ModelError, match="unknown compute type"):
        SpecEngine(base_model_dir, EngineOptions(compute_type="int4"))


def test_override_and_bad_values():
    assert resolve_compute_type("float32", "cpu", {"amx_bf16"}) == "float32"
    assert resolve_compute_type("bfloat16", "cpu", {"avx2"}) == "bfloat16"
    with pytest.raises(ValueError, match="unknown compute type"):
        resolve_compute_type("int4", "cpu", set())
    with pytest.raises(ValueError, match="CPU only"):
        resolve_compute_type("int8", "cuda", set())


def test_fast_bf16_flags():
    assert cpu_has_fast_bf16({"amx_bf16"}) and not cpu_has_fast_bf16({"avx2", "avx512f"})


def test_the_pass_shape_follows_the_cpu():
    amx, avx512_bf16 = {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, {"avx512f", "avx512_bf16"}
    # AMX: 16-row tiles and a fast 1-row attention kernel (docs/benchmarks.md, benchmarks/xeon-amx)
    assert (pass_rows_for("bfloat16", "cpu", amx), query_block_for("bfloat16", "cpu", amx)) == (16, 1)
    # AVX512-BF16 alone: a 1-row bf16 query is slow, 4 rows cost less
    assert (pass_rows_for("bfloat16", "cpu", avx512_bf16), query_block_for("bfloat16", "cpu", avx512_bf16)) == (8, 4)
    for flags in (amx, avx512_bf16, {"avx2"}):
        assert (pass_rows_for("float32", "cpu", flags), query_block_for("float32", "cpu", flags)) == (8, 1)
    assert (pass_rows_for("float16", "cuda", amx), query_block_for("float16", "cuda", amx)) == (16, 1)


def test_int8_quantizes_the_encoder_only():
    import torch
    from torch import nn

    from specscribe.models.compute import prepare_model
    from specscribe.models.weights import WhisperDims
    from specscribe.models.whisper import WhisperModel

    dims = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
                       n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=1)  # fmt: skip
    from specscribe.models.int8 import RowInt8Linear

    for compute_type in ("int8", "int8_float32"):
        model = prepare_model(WhisperModel(dims).eval(), compute_type, "cpu")
        assert not any(type(m) is nn.Linear for m in model.encoder.modules())  # quantized
        assert all(type(m.qkv) is RowInt8Linear for m in model.encoder.layers)  # one scale per row (models/int8.py)
        assert all(p.dtype == torch.float32 for p in model.decoder.parameters())  # a row-independent decoder


def test_set_threads_keeps_numpy_blas_to_one_thread():
    """numpy's OpenBLAS workers spin after each call, on the cores torch needs next (set_threads)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    with threadpool_limits(2, user_api="blas"):  # as numpy starts on a 2-core machine; restored after
        assert any(p["num_threads"] == 2 for p in threadpool_info() if p["user_api"] == "blas")
        set_threads(0)
        blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
        assert blas and all(p["num_threads"] == 1 for p in blas)
