"""Int8 linears with one activation scale per ROW, as CTranslate2's int8: the encoder's under compute types
``int8_float32`` and ``int8`` on CPU, the decoder's and its output head under ``int8`` (models/compute.py).

torch's dynamic int8 Linear (fbgemm) quantizes its input with one scale for the whole tensor: in a
Whisper encoder window, the loudest frame then sets the step for every quiet one. Measured on base's
encoder against float32 (relative error of the encoder output, 30 s windows of jfk / meeting-clean /
physicsworks): 0.24 with torch's per-tensor scale on jfk, 0.063 / 0.085 / 0.075 with the rows scaled
here, CTranslate2's own int8 encoder 0.081 on jfk. fbgemm has no per-row dynamic mode, so each row is
divided by its absolute maximum first (all rows then span [-1, 1]) and two guard rows, all +1 and all
-1, fix the tensor's range at exactly [-1, 1]: the per-tensor scale fbgemm computes is then the same
for every row and every input, each row is quantized on its own scale, and the int32 products are
multiplied back by each row's maximum. A row's result therefore never depends on the other rows.

Saturation: fbgemm's AVX2 kernel (vpmaddubsw) adds pairs of u8 x s8 products in int16, and the u8
activations sit around their zero point of 128 even for zero inputs, so 8-bit activations times 8-bit
weights saturate wherever two neighbouring weights are both large (random weights: 13-17 % error).
fbgemm's own cure, 7-bit activations (``reduce_range``), costs the activations a bit; the weights give
it up here instead, quantized to [-63, 63] per output channel: 2 x 255 x 63 < 2 ** 15, so no pair can
saturate, whatever the model. Relative error of base's encoder output as above: 0.063 / 0.085 / 0.075
with 7-bit weights, 0.10 / 0.10 / 0.088 with 7-bit activations.

Speed, 2-core AMD EPYC with AVX2 only (Zen 3), base encoder: 0.55 s a 30 s window against 0.74 s in float32
with oneDNN-prepacked linears, 1.35-1.40x on 10-15 s windows (scripts/bench_encoder.py --versus, docs/benchmarks.md).
Base's decoder pass, batch-invariant: 12.3 against 18.8 ms for one row, 66 against 78 ms for 16 sequences
(scripts/bench_engines.py pass_ms, benchmarks/epyc-avx2/bench_engines_int8_decoder.json).

    layer.qkv = RowInt8Linear.from_linear(layer.qkv)     # (..., in) -> (..., out)
    quantize_encoder(model.encoder)                      # all of its linears, in place
    quantize_decoder(model.decoder)                      # its layers' linears and the output head
    quantize_linears(draft.layers, DynamicInt8Linear)    # torch's dynamic int8, one scale per call
"""

from __future__ import annotations

import warnings
from typing import Mapping

import torch
from torch import nn

WEIGHT_LEVELS = 63  # weights in [-63, 63]: no u8 x s8 pair sum can saturate int16 (docstring)


class RowInt8Linear(nn.Module):
    """A frozen nn.Linear (inference only) on int8 weights, one scale per output channel (7 bits, see
    the module docstring), and 8-bit activations, one scale per input row."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, scale: torch.Tensor | None = None):
        """weight: float (out, in), quantized here; or, with scale (out,) float64, int8 (out, in) weights that
        were quantized before (`quantized()`, kept in the weight cache); ValueError when they do not fit."""
        super().__init__()
        self.out_features, self.in_features = weight.shape
        zero = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # torch.ao's quantized-tensor deprecation notice, not actionable
            warnings.simplefilter("ignore")
            if scale is None:
                w = weight.detach().float()
                scale = (w.abs().amax(1) / WEIGHT_LEVELS).clamp_min(1e-12).double()  # (out,)
                q = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            elif weight.dtype != torch.int8 or scale.shape != (self.out_features,):
                raise ValueError(f"int8 weights {weight.dtype} {tuple(weight.shape)}, scales {tuple(scale.shape)}")
            else:
                q = torch._make_per_channel_quantized_tensor(weight, scale.double(), zero, 0)
            self._packed = torch.ops.quantized.linear_prepack(q, None)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone(), persistent=False)
        guard = torch.ones(2, self.in_features)
        guard[1] = -1
        self.register_buffer("guard", guard, persistent=False)  # fixes the range at [-1, 1] (docstring)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "RowInt8Linear":
        return cls(linear.weight, linear.bias)

    def quantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 weights (out, in), their scales (out,) float64): what __init__ rebuilds this layer from."""
        q, _ = torch.ops.quantized.linear_unpack(self._packed)
        return q.int_repr(), q.q_per_channel_scales().double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        rows = x.reshape(-1, self.in_features).float()  # (R, in)
        top = rows.abs().amax(1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)  # (R, 1)
        unit = torch.cat([rows / top, self.guard])  # (R + 2, in), every row within [-1, 1]
        y = torch.ops.quantized.linear_dynamic(unit, self._packed, False)[:-2]  # (R, out)
        y = y * top if self.bias is None else torch.addcmul(self.bias, y, top)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class DynamicInt8Linear(nn.Module):
    """A frozen nn.Linear (inference only) as torch's dynamic int8 Linear computes it (``quantize_dynamic`` with
    ``per_channel_dynamic_qconfig``; bitwise the same outputs): int8 weights, one symmetric scale per output
    channel, activations quantized with one scale per call (7 bits: ``reduce_range``). For a draft's own layers,
    which only propose. Built with one prepack where torch.ao's module packs twice (a placeholder weight, then
    the real one): a draft's 16 linears took 0.26-0.33 s that way, 0.17 s this one (AVX2 EPYC)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        from torch.ao.quantization.observer import PerChannelMinMaxObserver

        self.out_features, self.in_features = weight.shape
        w = weight.detach().float()
        observer = PerChannelMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
        observer(w)
        scale, zero = observer.calculate_qparams()  # (out,), (out,)
        with warnings.catch_warnings():  # torch's quantized-tensor deprecation notice, not actionable
            warnings.simplefilter("ignore")
            q = torch.quantize_per_channel(w, scale.double(), zero.long(), 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        return torch.ops.quantized.linear_dynamic(x.float(), self._packed, True).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def quantize_linears(module: nn.Module, kind: type[nn.Module] = RowInt8Linear, stored: Mapping[str, torch.Tensor] | None = None,
                     prefix: str = "") -> nn.Module:
    """Swap every nn.Linear inside module for kind (RowInt8Linear or DynamicInt8Linear), in place; returns
    module. stored: RowInt8Linear weights quantized before, as int8_tensors gives them (names with prefix, the
    module's own name in the model); ValueError, with module unchanged, if one is missing or does not fit."""
    linears = [(parent, name, prefix + (f"{parent_name}.{name}" if parent_name else name), child)
               for parent_name, parent in module.named_modules() for name, child in parent.named_children()
               if type(child) is nn.Linear]
    if stored is None:
        new = [kind(child.weight, child.bias) for _, _, _, child in linears]
    else:
        for _, _, key, child in linears:
            q, scale = stored.get(f"{key}.qweight"), stored.get(f"{key}.qscale")
            if q is None or scale is None or q.dtype != torch.int8 or q.shape != child.weight.shape:
                raise ValueError(f"no int8 weights stored for {key} {tuple(child.weight.shape)}")
        new = [RowInt8Linear(stored[f"{key}.qweight"], child.bias, stored[f"{key}.qscale"]) for _, _, key, child in linears]
    for (parent, name, _, _), layer in zip(linears, new):
        setattr(parent, name, layer)
    return module


def int8_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """``<name>.qweight`` (out, in) int8 and ``<name>.qscale`` (out,) float64 of every RowInt8Linear in model
    (names as model.named_modules() gives them): quantize_encoder / quantize_decoder rebuild the same layers
    from them without quantizing again (models/weight_cache.py keeps them in a file)."""
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, RowInt8Linear):
            out[f"{name}.qweight"], out[f"{name}.qscale"] = module.quantized()
    return out


def quantize_encoder(encoder: nn.Module, stored: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """Swap every nn.Linear of an AudioEncoder (``qkv``, ``out``, ``mlp.fc1``, ``mlp.fc2``) for RowInt8Linear,
    in place; returns the encoder. stored: its int8 weights from int8_tensors(model) (quantize_linears)."""
    return quantize_linears(encoder, stored=stored, prefix="encoder.")


def quantize_decoder(decoder: nn.Module, stored: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    """Swap a TextDecoder's linears (every layer's, and the output head: its own int8 copy of the tied
    token embedding, which stays float32) for RowInt8Linear, in place; returns the decoder. Rows stay
    independent, so passes stay batch-invariant and speculation lossless at this precision. stored: as
    quantize_encoder's."""
    return quantize_linears(decoder, stored=stored, prefix="decoder.")
