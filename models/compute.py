"""Compute type by hardware, overridable.

CPU: bf16 with AVX512-BF16/AMX; else ``int8_float32`` (int8 dynamic encoder, float32 decoder);
else float32. CUDA: float16.

Why the decoder stays float32 under int8: torch's dynamic int8 Linear quantizes its input with ONE
scale for the whole (T, d) activation, so the logits of one row depend on the other rows of the
pass. A speculative verify pass over k+1 tokens then gives different logits than k+1 single
steps, and the output is no longer the target's own (measured: 6 of 36 decodes differed). A
float32 decoder keeps rows independent, so speculation stays lossless; the encoder, which
dominates CPU time and runs once per window, keeps the int8 speed-up. ``int8`` quantizes both
(fastest, not lossless under speculation).

    resolve_device("auto") -> "cuda" | "cpu"
    resolve_compute_type("auto", "cpu") -> "bfloat16" | "int8_float32" | "float32"
    model = prepare_model(model, "int8", "cpu")
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

COMPUTE_TYPES = ("auto", "float32", "bfloat16", "float16", "int8", "int8_float32")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is unreadable)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_fast_bf16(flags: set[str] | None = None) -> bool:
    """True where bf16 matmuls run natively: AMX (amx_bf16) or AVX512-BF16."""
    flags = cpu_flags() if flags is None else flags
    if flags:
        return "amx_bf16" in flags or "avx512_bf16" in flags
    return torch.backends.cpu.get_cpu_capability() in ("AVX512_BF16", "AMX")  # non-Linux fallback


def int8_supported() -> bool:
    """Dynamic int8 quantization needs a quantized engine (fbgemm on x86, qnnpack on ARM)."""
    return any(e != "none" for e in torch.backends.quantized.supported_engines)


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
        return requested
    if device == "cuda":
        return "float16"
    if cpu_has_fast_bf16(flags):
        return "bfloat16"
    return "int8_float32" if int8_supported() else "float32"


def set_threads(threads: int) -> None:
    """Set torch's intra-op threads when threads > 0 (0 keeps the library default)."""
    if threads > 0:
        torch.set_num_threads(threads)


def prepare_model(model: nn.Module, compute_type: str, device: str) -> nn.Module:
    """Move and convert a float32 model for compute_type (concrete, not "auto")."""
    model = model.to(device)
    if compute_type == "float32":
        return model
    if compute_type in ("bfloat16", "float16"):
        return model.to(getattr(torch, compute_type))
    if compute_type in ("int8", "int8_float32"):
        # Per-output-channel scales, as CTranslate2's int8: per-tensor scales made base stop
        # early on the German half of multilingual.mp3 (53 tokens instead of 127).
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        target = model if compute_type == "int8" else model.encoder  # see the module docstring
        with warnings.catch_warnings():  # torch.ao's deprecation notice, not actionable for users
            warnings.simplefilter("ignore")
            quantize_dynamic(target, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True)
        return model
    raise ValueError(f"unknown compute type {compute_type!r}")


MANY_ROWS = 64  # FewRowLinear: from this many rows on, x @ W_t


class FewRowLinear(nn.Linear):
    """nn.Linear for the decoder's passes of a few rows (1 token, or k+1 in a verify pass) on CPU.

    torch's F.linear computes x @ W.T with W stored (out, in); for a handful of rows the GEMM
    packs W on every call, and in a real decoder pass W comes from memory, not cache. Measured on
    this project's AVX2 CPU with cold caches (bench_speculative.py reports ms per target pass):
    - one row: x @ W_t, with the contiguous transpose W_t (in, out), is fastest when out >= in
      (the output head: 7.8 ms against 17.5 ms for F.linear); for out < in (fc2) W @ x.T is;
    - several rows: W @ x.T with W contiguous (out, in), whose large dimension is W's rows, is
      2-4x faster than F.linear or x @ W_t for every decoder shape (the head at 4 rows: 10 ms
      against 36-42 ms; fc1 at 4 rows: 0.4 ms against 1.2-1.8 ms);
    - many rows (MANY_ROWS or more: the cross-attention K/V of a window) are an ordinary GEMM,
      where x @ W_t is fastest again (6.2 ms against 8.4 for 575 encoder frames).
    The results equal F.linear's up to float rounding (about 1e-6); rows stay independent.

    The layer holds W (out, in) and, where one-row passes use it, W_t (in, out): contiguous
    copies of the same weights, for speed (the decoder's float32 weights, up to twice).
    """

    weight_t: torch.Tensor | None

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "FewRowLinear":
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight  # (out, in), contiguous (a tied head shares the embedding's)
        new.bias = linear.bias
        weight_t = linear.weight.detach().t().contiguous() if new.out_features >= new.in_features else None
        new.register_buffer("weight_t", weight_t, persistent=False)  # (in, out)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        rows = x.reshape(-1, self.in_features)  # (R, in)
        if self.weight_t is not None and (rows.shape[0] == 1 or rows.shape[0] >= MANY_ROWS):
            y = rows @ self.weight_t  # (R, out)
        else:
            y = (self.weight @ rows.T).T  # (R, out)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def speed_up_cpu_decoder(decoder: nn.Module) -> nn.Module:
    """Swap the float32 nn.Linear layers of a TextDecoder (its layers and output head) for
    FewRowLinear, in place, for inference on CPU. Quantized or half-precision decoders are left
    as they are. Returns the decoder."""
    first = next(decoder.parameters())
    if first.dtype != torch.float32 or first.device.type != "cpu":
        return decoder
    for module in list(decoder.layers.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, FewRowLinear.from_linear(child))
    if type(decoder.proj) is nn.Linear:
        decoder.proj = FewRowLinear.from_linear(decoder.proj)
    return decoder
