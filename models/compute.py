"""Compute type by hardware, overridable.

CPU: bf16 with AVX512-BF16/AMX; else ``int8_float32`` (row-scaled int8 encoder, float32 decoder) where torch's
int8 runs on fbgemm (x86), float32 elsewhere. CUDA: float16.

The int8 encoder (models/int8.py) scales each row on its own, as CTranslate2's int8. torch's dynamic int8, one
activation scale per whole window, was ``auto`` on AVX2-only CPUs until 2026-12-05 and cost accuracy that
CTranslate2's int8 does not: live JFK never locked English (language probability 0.50 where float32 reached
0.80), streamed "asked not" for "Ask not", and jfk + LibriVox streamed at 5.4 % WER against batch's 1.1 %;
``auto`` was float32 there from then to 2026-12-06. Row-scaled, on an AVX2-only EPYC (Zen 3): the live and
language tests pass, the encoder runs 1.34-1.40x faster than float32's, and batch text equals float32's on 10
of 14 evaluation clips (docs/benchmarks.md, "Machine of these figures: benchmarks/epyc-avx2/").

Why the decoder stays float32 under int8_float32 (and ``auto``): torch's dynamic int8 Linear
quantizes its input with ONE scale for the whole (T, d) activation, so the logits of one row depend
on the other rows of the pass. A speculative verify pass over k+1 tokens then gives different logits
than k+1 single steps, and the output is no longer the target's own (measured: 6 of 36 decodes differed). A
float32 decoder can be made row-independent (models/invariant.py), so speculation and batching
stay lossless; the encoder runs once per window and keeps the int8 speed-up. ``int8`` (faster-whisper's name)
puts the decoder's linears and output head on models/int8.py's RowInt8Linear as well: row-independent too, so
still lossless at that precision, but on the AVX2 EPYC where ``auto`` picks ``int8_float32`` it changed text on
two more of the 14 evaluation clips and sped batch up by 3 % only (the encoder dominates; docs/benchmarks.md,
"The decoder in int8 too"), so ``auto`` does not pick it.

    resolve_device("auto") -> "cuda" | "cpu"
    resolve_compute_type("auto", "cpu") -> "bfloat16" | "int8_float32" | "float32"
    model = prepare_model(model, "int8", "cpu")
"""

from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits
from torch import nn

from specscribe.machine import cpu_flags, flags_say_fast_bf16

COMPUTE_TYPES = ("auto", "float32", "bfloat16", "float16", "int8", "int8_float32")
INT8_TYPES = ("int8", "int8_float32")  # the compute types whose layers run on int8 weights (models/int8.py)


def cpu_has_fast_bf16(flags: set[str] | None = None) -> bool:
    """True where bf16 matmuls run natively: AMX (amx_bf16) or AVX512-BF16."""
    flags = cpu_flags() if flags is None else flags
    if flags:
        return flags_say_fast_bf16(flags)
    return torch.backends.cpu.get_cpu_capability() in ("AVX512_BF16", "AMX")  # non-Linux fallback


def int8_supported() -> bool:
    """Dynamic int8 quantization needs a quantized engine (fbgemm on x86, qnnpack on ARM)."""
    return any(e != "none" for e in torch.backends.quantized.supported_engines)


def int8_fast() -> bool:
    """Whether torch's int8 linears run on fbgemm (x86), as models/int8.py measured them. fbgemm is in every x86
    build of torch but refuses CPUs without AVX2 ("Your CPU does not support FBGEMM": an old Xeon, QEMU's
    default qemu64 CPU), so the CPU's own capability decides too."""
    engines = torch.backends.quantized.supported_engines
    return any(e in ("fbgemm", "x86") for e in engines) and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; choose auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA GPU")
    return device


def resolve_compute_type(requested: str, device: str, flags: set[str] | None = None) -> str:
    """requested in COMPUTE_TYPES -> a concrete compute type for device ("cpu" or "cuda")."""
    if requested not in COMPUTE_TYPES:
        raise ValueError(f"unknown compute type {requested!r}; choose {', '.join(COMPUTE_TYPES)}")
    if requested != "auto":
        if device == "cuda" and requested.startswith("int8"):
            raise ValueError("int8 dynamic quantization runs on CPU only; use float16 on CUDA")
        if requested.startswith("int8") and not int8_supported():
            raise ValueError("int8 needs torch's quantized engine (fbgemm or qnnpack), which this torch lacks")
        return requested
    if device == "cuda":
        return "float16"
    if cpu_has_fast_bf16(flags):
        return "bfloat16"
    return "int8_float32" if int8_fast() else "float32"


def set_threads(threads: int) -> None:
    """Give the cores to the model: torch's intra-op threads when threads > 0 (0 keeps the library
    default), and always one thread to numpy's BLAS (OpenBLAS).

    numpy's BLAS runs only small products here (the mel filter bank of every encode), but after each
    call OpenBLAS's worker threads spin for a while, on the cores that torch's threads need next: on a
    2-core Xeon, an encode of a 7 s window right after its features took 110 ms instead of 19 ms
    (docs/benchmarks.md, "numpy's BLAS threads"). Process-wide, as thread pools are.
    """
    if threads > 0:
        torch.set_num_threads(threads)
    threadpool_limits(1, user_api="blas")


def decoder_dtype(compute_type: str) -> str:
    """What a concrete compute type's decoder, where the target's passes run, computes in: ``int8_float32``'s is
    float32 (only its encoder is int8), every other type's is the type itself."""
    return "float32" if compute_type == "int8_float32" else compute_type


def prepare_model(model: nn.Module, compute_type: str, device: str, int8_weights: dict | None = None) -> nn.Module:
    """Move and convert a float32 model for compute_type (concrete, not "auto"). int8_weights: a Whisper model's
    int8 linears quantized before (models/int8.py int8_tensors), for the int8 types; ValueError if they do not fit."""
    model = model.to(device)
    if compute_type == "float32":
        return model
    if compute_type in ("bfloat16", "float16"):
        return model.to(getattr(torch, compute_type))
    if compute_type in INT8_TYPES:
        # A Whisper model's encoder gets one activation scale per row (models/int8.py), and under
        # "int8" its decoder too (the module docstring); other modules (a draft's own layers, which
        # only propose) get torch's dynamic int8, one scale per call (DynamicInt8Linear). Weights: one scale per
        # output channel, as CTranslate2's int8 (per-tensor weight scales made base stop early on
        # the German half of multilingual.mp3).
        if hasattr(model, "encoder"):
            from specscribe.models.int8 import quantize_decoder, quantize_encoder

            quantize_encoder(model.encoder, int8_weights)
            if compute_type == "int8":
                quantize_decoder(model.decoder, int8_weights)
            return model
        from specscribe.models.int8 import DynamicInt8Linear, quantize_linears

        return quantize_linears(model, DynamicInt8Linear)
    raise ValueError(f"unknown compute type {compute_type!r}")


def cpu_has_amx(flags: set[str] | None = None) -> bool:
    """True on CPUs with AMX tiles for bf16 (amx_bf16): oneDNN's bf16 kernels and torch's attention behave
    differently there than on AVX512-BF16 alone (see pass_rows_for, query_block_for)."""
    return "amx_bf16" in (cpu_flags() if flags is None else flags)


def pass_rows_for(compute_type: str, device: str, flags: set[str] | None = None) -> int:
    """Rows per block of a batch-invariant decoder pass (models/invariant.py PassShape).

    Every target pass is padded to a multiple of this, so it is the cost floor of a one-token
    step and the unit in which a batched pass grows. Measured with scripts/bench_engines.py pass_ms
    (docs/benchmarks.md):
    - 2-core Xeon with AVX512-BF16, no AMX: bf16 blocks of 8 cost 13 ms for one row, 26 ms for 8
      sequences and 49 ms for 16 (blocks of 16: 17, 29, 45 ms; of 4: 11, 36, 61 ms); float32 blocks
      of 8: 16, 36, 72 ms. 8 keeps a lone decode (streaming, one short file) cheap and costs a batch
      of 16 no more per token than blocks of 16 do.
    - 2-core Xeon with AMX, bf16 (query block 1): blocks of 16 cost 7.7 ms for one row, 32 ms for 16
      sequences, 32 ms for 33 rows of one; blocks of 8: 7.1, 34, 37 ms; of 32: 9.3, 32, 30 ms
      (benchmarks/xeon-amx/bench_engines_pass_shapes.json).
    - 2-core AMD EPYC, AVX2 only, float32: blocks of 8 cost 39 ms for one row, 78 ms for 8 sequences and
      151 ms for 16 (blocks of 4: 32, 95, 175 ms; of 16: 50, 92, 143 ms). Blocks of 4 were timed as the
      default there and gave no clear gain in batch or live (benchmarks/epyc-avx2/bench_*_pass_rows.json).
    CUDA: untested here, 16.
    """
    if device == "cuda":
        return 16
    return 16 if compute_type == "bfloat16" and cpu_has_amx(flags) else 8


def query_block_for(compute_type: str, device: str, flags: set[str] | None = None) -> int:
    """Attention query rows per call of a batch-invariant pass (PassShape.query_block).

    torch's CPU attention has a fast kernel for a 1-row query; whether it beats a block of rows
    depends on the CPU:
    - 2-core AMD EPYC with AVX512-BF16 (torch 2.13, 8 heads): bf16 attention over 1500 encoder keys
      (out of cache) takes 0.83-1.06 ms for a 1-row query, 0.44-0.48 ms for 2 or 4 rows, 0.53 ms for
      8; over 64-448 cached keys, 59-302 us for 1 row, 39-106 us for 4. float32 is fast row by row
      (0.33-0.53 ms cross, 19-60 us self) and slower in blocks. So bf16 attends in blocks of 4
      (cheaper even for a lone row), float32 row by row; docs/benchmarks.md ("Attention in query
      blocks").
    - 2-core Xeon with AMX, bf16: over 1500 encoder keys (out of cache), 0.18 ms for 1 row, 0.32 ms
      for 4, 0.37 ms for 16. A pass of 16 sequences costs 32 ms row by row (16-row blocks) against
      49 ms in query blocks of 4 (8-row blocks), a 33-row verify pass 32 ms both
      (benchmarks/xeon-amx/bench_engines_pass_shapes.json): 1.
    CUDA: untested, 1.
    """
    if device == "cuda" or compute_type != "bfloat16" or cpu_has_amx(flags):
        return 1
    return 4


PASS_LINEARS = ("qkv", "out", "cross_q", "cross_out", "fc1", "fc2")  # the linears a decoder pass runs


class PackedLinear(nn.Linear):
    """nn.Linear whose weight is also kept prepacked by oneDNN for blocks of ``rows`` rows (CPU).

    torch's F.linear on CPU reorders the weight into oneDNN's blocked layout on every call; for
    the few rows of a decoder pass that reorder is a large part of the cost (the base output
    head, bf16, 16 rows: 6.2 ms prepacked against 8.6 ms). The packed copy is used under
    inference (no autograd); training and anything that needs gradients use F.linear on the
    same ``weight``. Rows stay independent at a fixed block size (tests/unit/test_invariant.py).
    """

    packed: torch.Tensor
    activation: str = "none"  # or "gelu", fused into the oneDNN call (PackedMLP)

    @classmethod
    def from_linear(cls, linear: nn.Linear, rows: int, activation: str = "none") -> "PackedLinear":
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias  # shared (a tied head stays tied)
        new.activation = activation
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows)
        new.register_buffer("packed", packed, persistent=False)
        return new

    def __deepcopy__(self, memo: dict) -> nn.Linear:
        """A copy is a plain nn.Linear (the packed tensor is opaque and cannot be copied): draft
        layers made from the target's are copies, and need no packing."""
        import copy

        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        plain.weight = copy.deepcopy(self.weight, memo)
        plain.bias = copy.deepcopy(self.bias, memo)
        return plain

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            y = super().forward(x)
            return nn.functional.gelu(y) if self.activation == "gelu" else y
        algorithm = "none" if self.activation == "gelu" else ""  # gelu's "none": the exact (erf) form
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, self.activation, [], algorithm)


class PackedMLP(nn.Module):
    """An encoder MLP, fc2(gelu(fc1(x))), on prepacked weights with the gelu fused into fc1's call.

    Whole base encoder with pack_encoder, 2-core AVX512-BF16 EPYC: 1.03-1.21x a window in bf16 (30 s
    to 6 s windows), 1.26-1.29x in float32 (scripts/bench_encoder.py --packing, docs/benchmarks.md).
    Same parameter names as encoder.MLP (``fc1``, ``fc2``), so state dicts do not change.
    """

    def __init__(self, mlp: nn.Module, rows: int):
        super().__init__()
        self.fc1 = PackedLinear.from_linear(mlp.fc1, rows, activation="gelu")
        self.fc2 = PackedLinear.from_linear(mlp.fc2, rows)
        self._plain_type = type(mlp)

    def __deepcopy__(self, memo: dict) -> nn.Module:
        """A copy is the plain MLP again (its linears copy as plain nn.Linear, see PackedLinear)."""
        import copy

        plain = self._plain_type.__new__(self._plain_type)
        nn.Module.__init__(plain)
        plain.fc1, plain.fc2 = copy.deepcopy(self.fc1, memo), copy.deepcopy(self.fc2, memo)
        return plain

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (1, S, d) -> (1, S, d)
        return self.fc2(self.fc1(x))


def _can_pack(weight: torch.Tensor, rows: int, activation: str = "none") -> bool:
    """Whether oneDNN packs linears of weight's dtype here, with that fused activation (CPU; not bf16
    without AVX512, not fp16 without AVX512-FP16)."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    try:
        probe = PackedLinear.from_linear(nn.Linear(8, 8, dtype=weight.dtype), rows, activation)
        probe(torch.zeros(rows, 8, dtype=weight.dtype))
    except RuntimeError:  # e.g. bf16 on a CPU without AVX512: plain F.linear, still batch-invariant
        return False
    return True


def pack_encoder(encoder: nn.Module, rows: int) -> nn.Module:
    """Swap an AudioEncoder's float linears for PackedLinear (``qkv``, ``out``) and its MLPs for
    PackedMLP, in place, on CPU, packed for windows of ``rows`` frames (1500 for 30 s; other
    lengths run too). Left as they are: CUDA, int8 (quantized) encoders, CPUs or dtypes oneDNN
    cannot pack. The encoder runs one window per call, so packing changes no batch invariance.
    Returns the encoder."""
    if not _can_pack(encoder.conv1.weight, rows, "gelu"):
        return encoder
    for layer in encoder.layers:
        for name in ("qkv", "out"):
            if type(getattr(layer, name)) is nn.Linear:
                setattr(layer, name, PackedLinear.from_linear(getattr(layer, name), rows))
        if type(layer.mlp.fc1) is nn.Linear and type(layer.mlp.fc2) is nn.Linear:
            layer.mlp = PackedMLP(layer.mlp, rows)
    return encoder


def pack_decoder(decoder: nn.Module, rows: int) -> nn.Module:
    """Swap the pass linears of a TextDecoder (PASS_LINEARS in its layers, and its output head)
    for PackedLinear, in place, on CPU. Left as they are: CUDA and quantized decoders, and CPUs or
    dtypes oneDNN cannot pack (bf16 without AVX512). Returns the decoder."""
    if not _can_pack(decoder.token_embedding.weight, rows):
        return decoder
    for module in list(decoder.layers.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and name in PASS_LINEARS:
                setattr(module, name, PackedLinear.from_linear(child, rows))
    if type(decoder.proj) is nn.Linear:
        decoder.proj = PackedLinear.from_linear(decoder.proj, rows)
    return decoder
