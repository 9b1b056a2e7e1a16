"""Whisper's audio encoder in torch, and the layer pieces its decoder shares (models/whisper.py).

    encoder = AudioEncoder(dims)
    x = encoder(mel)                    # (1, n_mels, 2 * S) -> (1, S, d); S = 1500 for a 30 s window

Pre-LN transformer with exact (erf) GELU, LayerNorm eps 1e-5, stored sinusoid positions. On CPU the
engine swaps the float linears for prepacked oneDNN ones with the GELU fused into fc1
(models/compute.py pack_encoder); the modules and their parameter names stay these.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specscribe.models.weights import WhisperDims

LN_EPS = 1e-5


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(1, T, d) -> (1, H, T, Dh)."""
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(1, H, T, Dh) -> (1, T, d)."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


class MLP(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d, d_ff)
        self.fc2 = nn.Linear(d_ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    """Pre-LN self-attention (fused QKV) + MLP."""

    def __init__(self, d: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.attn_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.mlp = MLP(d, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (1, S, d)
        q, k, v = self.qkv(self.attn_ln(x)).chunk(3, dim=-1)
        h = self.n_heads
        # contiguous heads: torch's CPU flash kernel runs faster on them than on strided views (3-15 %,
        # scripts/bench_encoder.py --packing attention_ms)
        a = F.scaled_dot_product_attention(*(split_heads(t, h).contiguous() for t in (q, k, v)))
        x = x + self.out(merge_heads(a))
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self, dims: WhisperDims):
        super().__init__()
        d = dims.n_audio_state
        self.conv1 = nn.Conv1d(dims.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", torch.zeros(dims.n_audio_ctx, d))
        self.layers = nn.ModuleList(EncoderLayer(d, dims.n_audio_head, 4 * d) for _ in range(dims.n_audio_layer))
        self.ln_post = nn.LayerNorm(d, eps=LN_EPS)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # (1, n_mels, 3000) -> (1, 1500, d)
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)  # (1, 1500, d)
        x = x + self.positional_embedding[: x.shape[1]].to(x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.ln_post(x)
