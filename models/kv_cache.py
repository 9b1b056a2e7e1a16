"""A preallocated self-attention KV cache: append T positions, crop back to any length; and the
cross-attention K/V of the windows in use, computed once per window.

One ``KVCache`` serves a stack of decoder layers over one window. Keys and values live in
tensors of the full context length, allocated once; ``crop`` only moves the length, so rolling
back rejected draft tokens costs nothing. Layers write their slice with ``write`` during a
forward pass; the session calls ``advance`` once every layer has written.
"""

from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Callable

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
        # zeros, not empty: a batch-invariant pass attends over the full capacity with a mask, and a
        # masked key must be finite (NaN * 0 is NaN); positions past the length are never unmasked
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.length = 0

    def write(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, full: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v (T, H, Dh) at positions [length, length+T) of ``layer``.

        Returns the keys and values (1, H, L, Dh) as views (no copy): L = length+T, or the
        full capacity max_len when ``full`` (positions past length+T hold zeros or stale,
        finite values; a caller that reads them masks them).
        """
        start, end = self.length, self.length + k.shape[0]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} positions > capacity {self.max_len}")
        self.keys[layer][0, :, start:end] = k.transpose(0, 1)
        self.values[layer][0, :, start:end] = v.transpose(0, 1)
        stop = self.max_len if full else end
        return self.keys[layer][:, :, :stop], self.values[layer][:, :, :stop]

    def advance(self, n: int) -> None:
        """Mark n newly written positions as valid (after all layers wrote them)."""
        self.length += n

    def copy_from(self, other: "KVCache") -> None:
        """Become a copy of other's valid positions (a beam forking from its parent)."""
        n = other.length
        if n > self.max_len or len(other.keys) != len(self.keys):
            raise ValueError("caches of different shapes")
        for mine, theirs in zip(self.keys + self.values, other.keys + other.values):
            mine[:, :, :n].copy_(theirs[:, :, :n])
        self.length = n

    def crop(self, length: int) -> None:
        """Drop positions >= length. Cropping beyond the current length is an error."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of length {self.length} to {length}")
        self.length = length


class CrossKVCache:
    """Cross-attention K/V per window in use, so that a window's decode, its language detection and
    its word alignment compute them once (the server interleaves many sessions' windows, so "the last
    window" alone would miss).

    Keyed by the encoder output tensor itself (its identity, checked through a weak reference): an
    entry goes when its window's tensor is freed, and at most ``size`` entries are kept, the least
    recently used going first, so code that holds windows longer (the draft adapter's examples)
    never pins more than that. Safe to call from any thread.
    """

    def __init__(self, size: int = 16):
        self._size = size
        self._entries: collections.OrderedDict[int, tuple[weakref.ref, Any]] = collections.OrderedDict()
        self._lock = threading.RLock()  # a callback may fire in a thread that holds it

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, enc: torch.Tensor, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(enc's entry, or compute() stored as it; whether it was computed now)."""
        key = id(enc)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is enc:
                self._entries.move_to_end(key)
                return entry[1], False
        value = compute()
        with self._lock:
            self._entries[key] = (weakref.ref(enc, _drop_callback(self, key)), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value, True

    def _drop(self, key: int, ref: weakref.ref) -> None:
        """A window's tensor was freed: its entry goes (unless the id already names a newer window)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]


def _drop_callback(cache: CrossKVCache, key: int) -> Callable[[weakref.ref], None]:
    """The weak reference's callback; it holds the cache weakly, so entries never keep it alive."""
    owner = weakref.ref(cache)

    def drop(ref: weakref.ref) -> None:
        live = owner()
        if live is not None:
            live._drop(key, ref)

    return drop
