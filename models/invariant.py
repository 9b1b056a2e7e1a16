"""Batch invariance: a row's decoder output must not depend on what else shares its pass.

Why: the target verifies drafted tokens, and serves many sequences, in passes of a varying
number of rows. If a row's logits changed with the row count, a verify pass could disagree with
the one-token step it replaces, and batching or drafting would change the text.

What breaks it on CPU (measured, scripts/bench_engines.py and FINDINGS.md): the math libraries
pick their kernel, blocking and thread split by shape. A float32 ``F.linear`` over 1 row
(a GEMV) gives other bits than row 0 of the same product over 2-64 rows, and rows 2-15, 16-56
and 57+ form three more classes; ``scaled_dot_product_attention`` gives one class for a query
of 1 row and another for 2-64 rows; which shapes differ changes with the CPU and the dtype.
Within ONE shape, though, a row's result is the same at every position of the call and
whatever the other rows hold (tests/unit/test_invariant.py checks both on random data, and
tests/integration/test_row_invariance.py on the real model).

So every kernel call in the target's decoder has a shape that depends on nothing but the row's
own sequence:
- row-wise work (LayerNorm, linears, GELU, output head) runs on blocks of exactly
  ``PassShape.rows`` rows, zero-padded (``RowBlocks``);
- attention runs per sequence over its own keys: self-attention over a cache length that
  depends on the row's own position only (``PassShape.key_lengths``, masked beyond the row),
  cross-attention over its own encoder output. In self-attention a sequence's prompt is attended as
  one group of rows (it is always prefilled as that same group: by the reference loop, by a verify
  pass that appends drafts, alone or batched), and every other row alone, as a query of one row
  (``attend``). Cross-attention reads the same keys for every row of a sequence, so its rows go
  through in blocks of exactly ``PassShape.query_block`` query rows, zero-padded
  (``attend_blocks``): within one query length a row gets the same bits at every position of the
  block and whatever the other rows hold, as for the linears.

Elementwise work (embedding sums, residual adds) is exact per element and needs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PassShape:
    """The fixed shapes of a batch-invariant decoder pass.

    Attributes:
        rows: rows per block of row-wise work. Every LayerNorm, linear and head call sees
            exactly this many rows. Padding costs little up to the row count at which a pass
            stops being memory-bound, and compute beyond it; scripts/bench_engines.py measures
            it per compute type.
        key_block: self-attention reads the cache up to the next multiple of this many
            positions above the row's own position (masked beyond it): a length that depends on
            the row alone, and far shorter than the full context early in a window.

        query_block: cross-attention query rows per call (a sequence's rows, zero-padded to a
            multiple of it). 1 = each row alone. Where a one-row query takes a slow kernel (torch's
            CPU bf16 attention: a 1-row query over 1500 keys costs about twice a 4-row one,
            models/compute.py query_block_for), a block serves one row for less, and 4 rows for
            the price of one.
    """

    rows: int = 16
    key_block: int = 64
    query_block: int = 1

    def __post_init__(self):
        if min(self.rows, self.key_block, self.query_block) < 1:
            raise ValueError(f"PassShape needs rows, key_block and query_block >= 1, got {self}")

    def key_lengths(self, start: int, n: int, capacity: int) -> list[int]:
        """Keys read by the rows at positions start .. start+n-1."""
        kb = self.key_block
        return [min(capacity, (p // kb + 1) * kb) for p in range(start, start + n)]


class RowBlocks:
    """Applies row-wise functions in blocks of a fixed number of rows (0: in one call, as is).

    Attributes:
        size: rows per block (0 = no blocking: the fast, shape-dependent path of draft decoders).
        rows: real rows of the pass.
        padded: rows after padding (a multiple of size).
    """

    def __init__(self, size: int, rows: int):
        self.size, self.rows = size, rows
        self.padded = -(-rows // size) * size if size else rows

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, d) -> (padded, d), zero rows appended."""
        if self.padded == x.shape[0]:
            return x
        return torch.cat([x, x.new_zeros(self.padded - x.shape[0], *x.shape[1:])])

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """fn over x (padded, d_in) block by block -> (padded, d_out)."""
        if not self.size or x.shape[0] == self.size:
            return fn(x)
        return torch.cat([fn(x[i : i + self.size]) for i in range(0, x.shape[0], self.size)])


def attend(
    q: torch.Tensor,  # (T, H, Dh): the sequence's query rows of this pass
    keys: torch.Tensor,  # (1, H, L, Dh)
    values: torch.Tensor,  # (1, H, L, Dh)
    mask: torch.Tensor | None,  # (T, L) bool, True = attend; None = every key
    group: int = 0,  # leading rows attended together (the prompt); the rest one by one
    key_lengths: list[int] | None = None,  # per row, how many keys it reads (None: all L)
    invariant: bool = True,
) -> torch.Tensor:  # (T, H, Dh)
    """Scaled dot-product attention of one sequence's rows.

    invariant=False: one call over all T rows and L keys (fastest; the kernel depends on T).
    invariant=True: rows [0, group) in one call over the keys the group's last row reads; every
    later row as its own call, a query of one row over its own key length.
    """
    if not invariant:
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask)  # (1, H, T, Dh)
        return out[0].transpose(0, 1)
    t = q.shape[0]
    lengths = key_lengths or [keys.shape[2]] * t
    out = q.new_empty(q.shape)
    if group:
        n = lengths[group - 1]
        m = None if mask is None else mask[:group, :n]
        out[:group] = attend(q[:group], keys[:, :, :n], values[:, :, :n], m, invariant=False)
    for i in range(group, t):
        # one call per row: batching single-row queries (stride-0 expanded keys) is not row-invariant
        # everywhere (torch's CPU flash kernel, float32, on an AMD EPYC), and costs about the same
        n = lengths[i]
        m = None if mask is None else mask[i : i + 1, :n]  # (1, n)
        out[i] = F.scaled_dot_product_attention(q[i : i + 1].transpose(0, 1)[None], keys[:, :, :n], values[:, :, :n],
                                                attn_mask=m)[0, :, 0]  # (H, Dh)
    return out


def attend_blocks(
    q: torch.Tensor,  # (T, H, Dh): the sequence's query rows of this pass
    keys: torch.Tensor,  # (1, H, S, Dh): every row reads all of them (cross-attention)
    values: torch.Tensor,  # (1, H, S, Dh)
    block: int,  # query rows per call
) -> torch.Tensor:  # (T, H, Dh)
    """Attention without a mask, in calls of exactly `block` query rows (the last zero-padded)."""
    t = q.shape[0]
    padded = RowBlocks(block, t).pad(q).transpose(0, 1)[None]  # (1, H, T_pad, Dh)
    out = torch.cat([F.scaled_dot_product_attention(padded[:, :, i : i + block], keys, values)
                     for i in range(0, padded.shape[2], block)], dim=2)  # (1, H, T_pad, Dh)
    return out[0, :, :t].transpose(0, 1)
