"""The draft decoder as trained: target decoder layers copied, run batched without a KV cache.

``DraftNet`` holds deep copies of some of the target's ``DecoderLayer`` modules (trainable); the
token embedding, positions, final LayerNorm and the tied output head are the target's own
(frozen, never stored in the draft), as in models/draft.py's ``DraftDecoder``. With ``freeze_cross_kv`` the
copied layers keep the target's cross-attention K/V projection, so at inference the draft can
reuse the target's precomputed cross K/V of those layers instead of computing its own.

An optional reduced vocabulary (``vocab_ids``) restricts the head to those rows of the embedding.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from specscribe.models.encoder import merge_heads, split_heads
from specscribe.models.whisper import DecoderLayer, TextDecoder


def layer_forward(layer: DecoderLayer, x: torch.Tensor, cross_k: torch.Tensor, cross_v: torch.Tensor) -> torch.Tensor:
    """One DecoderLayer over whole (right-padded) sequences, causal, no cache.

    x (B, T, d); cross_k, cross_v (B, H, S, Dh) -> (B, T, d).
    """
    h = layer.n_heads
    q, k, v = layer.qkv(layer.attn_ln(x)).chunk(3, dim=-1)
    a = F.scaled_dot_product_attention(split_heads(q, h), split_heads(k, h), split_heads(v, h), is_causal=True)
    x = x + layer.out(merge_heads(a))
    q = split_heads(layer.cross_q(layer.cross_ln(x)), h)
    a = F.scaled_dot_product_attention(q, cross_k.to(q.dtype), cross_v.to(q.dtype))
    x = x + layer.cross_out(merge_heads(a))
    return x + layer.mlp(layer.mlp_ln(x))


class DraftNet(nn.Module):
    """Trainable draft decoder over a target TextDecoder.

    Attributes:
        source_layers: indices of the target layers the draft layers were copied from.
        layers: the draft's DecoderLayers (trainable copies).
        vocab_ids: (N,) long token ids of the reduced head, or None for the full vocabulary.
    """

    def __init__(
        self,
        target: TextDecoder,
        source_layers: Sequence[int],
        vocab_ids: torch.Tensor | None = None,
        freeze_cross_kv: bool = True,
        layers: Sequence[DecoderLayer] | None = None,
    ):
        """layers: the draft's own (float32) layers instead of copies of the target's, for a
        target whose layers are not plain modules any more (an engine's packed decoder)."""
        super().__init__()
        self.source_layers = tuple(int(i) for i in source_layers)
        n = len(target.layers)
        if not self.source_layers or any(not -n <= i < n for i in self.source_layers):
            raise ValueError(f"source layers {self.source_layers} out of range for a {n}-layer target")
        self.source_layers = tuple(i % n for i in self.source_layers)
        if layers is None:
            layers = [copy.deepcopy(target.layers[i]) for i in self.source_layers]
        if len(layers) != len(self.source_layers):
            raise ValueError(f"{len(layers)} layers for {len(self.source_layers)} source layers")
        self.layers = nn.ModuleList(layer.float() for layer in layers)
        self.freeze_cross_kv = freeze_cross_kv
        for layer in self.layers:
            for p in layer.parameters():
                p.requires_grad_(True)
            if freeze_cross_kv:
                layer.cross_kv.requires_grad_(False)
        # shared with the target, frozen, not part of this module's state_dict
        self._embedding = [target.token_embedding.weight.detach().float()]  # (V, d)
        self._positions = [target.positional_embedding.detach().float()]  # (n_ctx, d)
        self._ln = [copy.deepcopy(target.ln).float().requires_grad_(False)]  # final LN, the target's
        self.vocab_ids = None if vocab_ids is None else vocab_ids.long()

    def to_device(self, device: str | torch.device) -> "DraftNet":
        """Move the trainable layers and the shared frozen tensors."""
        self.to(device)
        self._embedding = [self._embedding[0].to(device)]
        self._positions = [self._positions[0].to(device)]
        self._ln = [self._ln[0].to(device)]
        if self.vocab_ids is not None:
            self.vocab_ids = self.vocab_ids.to(device)
        return self

    @property
    def embedding(self) -> torch.Tensor:
        return self._embedding[0]

    @property
    def head(self) -> torch.Tensor:
        """(N, d) rows of the output projection (tied to the embedding)."""
        emb = self.embedding
        return emb if self.vocab_ids is None else emb[self.vocab_ids]

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.parameters() if p.requires_grad]

    def cross_keys_values(self, enc: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """enc (B, S, d) -> per layer K, V (B, H, S, Dh); no gradient (frozen cross K/V projection)."""
        out = []
        with torch.no_grad():
            for layer in self.layers:
                k, v = layer.cross_kv(enc.to(layer.cross_kv.weight.dtype)).chunk(2, dim=-1)
                out.append((split_heads(k, layer.n_heads), split_heads(v, layer.n_heads)))
        return out

    def forward(
        self, tokens: torch.Tensor, enc: torch.Tensor, cross: list | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """tokens (B, T) long, enc (B, S, d) -> logits (B, T, N) over the head's vocabulary, or
        (M, N) at the M positions where mask (B, T) is True (the head costs most: padding skips it)."""
        t = tokens.shape[1]
        x = F.embedding(tokens, self.embedding) + self._positions[0][:t]  # (B, T, d)
        if cross is None or not self.freeze_cross_kv:
            cross = self.cross_keys_values(enc) if self.freeze_cross_kv else self._cross_with_grad(enc)
        for layer, (ck, cv) in zip(self.layers, cross):
            x = layer_forward(layer, x, ck, cv)
        if mask is not None:
            x = x[mask]  # (M, d)
        return self._ln[0](x) @ self.head.to(x.dtype).T

    def _cross_with_grad(self, enc: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        for layer in self.layers:
            k, v = layer.cross_kv(enc.float()).chunk(2, dim=-1)
            out.append((split_heads(k, layer.n_heads), split_heads(v, layer.n_heads)))
        return out

    def text_decoder(self, target: TextDecoder) -> TextDecoder:
        """An inference TextDecoder (models/whisper.py) with these layers and the target's shared parts."""
        layers = [copy.deepcopy(layer).eval() for layer in self.layers]
        proj = target.proj
        if self.vocab_ids is not None:
            proj = nn.Linear(self.embedding.shape[1], len(self.vocab_ids), bias=False)
            proj.weight = nn.Parameter(self.head.detach().clone(), requires_grad=False)
        return TextDecoder(target.token_embedding, target.positional_embedding, layers, target.ln, proj)
