"""A preallocated self-attention KV cache: append T positions, crop back to any length.

One ``KVCache`` serves a stack of decoder layers over one window. Keys and values live in
tensors of the full context length, allocated once; ``crop`` only moves the length, so rolling
back rejected draft tokens costs nothing. Layers write their slice with ``write`` during a
forward pass; the session calls ``advance`` once every layer has written.
"""

from __future__ import annotations

import torch


class KVCache:
    """Self-attention keys/values for ``n_layers`` layers, batch size 1.

    Attributes:
        keys, values: per layer, (1, n_heads, max_len, head_dim).
        length: positions currently valid.
        max_len: capacity (the decoder's n_text_ctx).
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (1, n_heads, max_len, head_dim)
        # empty, not zeros: only positions < length are ever read, and every one of them was written
        self.keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (1, H, T, Dh) at [length, length+T) of ``layer``.

        Returns the valid keys and values (1, H, length+T, Dh) as views (no copy).
        """
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} positions > capacity {self.max_len}")
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, n: int) -> None:
        """Mark n newly written positions as valid (after all layers wrote them)."""
        self.length += n

    def crop(self, length: int) -> None:
        """Drop positions >= length. Cropping beyond the current length is an error."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = length
