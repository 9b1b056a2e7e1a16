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
  ``PassShape.rows`` rows, zero-padded (``RowBlocks``), except a prompt: one call of its own rows,
  as it is always prefilled (below);
- attention runs per sequence over its own keys, in blocks of exactly ``PassShape.query_block``
  query rows, zero-padded: within one query length a row gets the same bits at every place of
  the block and whatever the other rows hold, as for the linears. On CPU a sequence's blocks that
  read the same keys share one kernel call, stacked where the kernel puts heads
  (``stacked_attention``): each block is then a work item of its own, with the bits it gets alone.
  - Self-attention (``attend``): a sequence's prompt is attended as one group of rows (it is
    always prefilled as that same group: by the reference loop, by a verify pass that appends
    drafts, alone or batched). Every later row goes in the block of query_block positions that
    holds its position, over a cache length set by that block (``PassShape.key_length``, masked
    beyond the row): its slot, keys and mask depend on its position alone.
  - Cross-attention (``attend_blocks``) reads the same encoder keys for every row, so a
    sequence's rows go through in consecutive blocks, after its prompt group in one call, as in
    self-attention (with 1-row blocks, a 50-token prompt would otherwise take 50 calls a layer).

Elementwise work (embedding sums, residual adds) is exact per element and needs nothing.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

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
        query_block: attention query rows per call (zero-padded); it divides key_block. 1 = each
            row alone. Where a one-row query takes a slow kernel (torch's CPU bf16 attention: a
            1-row query costs 1.5-3 times a 4-row one, models/compute.py query_block_for), a
            block serves one row for less, and 4 rows for the price of one.
        whole: row-wise work in calls of up to WHOLE_ROWS rows instead of blocks of ``rows``: each block
            re-reads every weight, and a call over all rows reads them once (bf16, 160 rows, 2-core AMD
            EPYC with AVX512-BF16: the output head 20 ms against 39 ms in blocks of 8). Only where the
            machine's kernels give every row the same bits at any multiple of ``rows`` rows: None = probe
            at the first pass that needs more than one call (``whole_calls_keep_bits``), then True or False.
    """

    rows: int = 16
    key_block: int = 64
    query_block: int = 1
    whole: bool | None = False

    def __post_init__(self):
        if min(self.rows, self.key_block, self.query_block) < 1 or self.key_block % self.query_block:
            raise ValueError(f"PassShape needs rows, key_block, query_block >= 1 and query_block dividing key_block, got {self}")

    def key_length(self, position: int, capacity: int) -> int:
        """Keys read by the row at this position (a multiple of key_block, at most capacity)."""
        return min(capacity, (position // self.key_block + 1) * self.key_block)


class RowBlocks:
    """Applies row-wise functions in blocks of a fixed number of rows (0: in one call, as is).

    Leading ``groups`` (prompts) go through in one call each, of exactly their own rows: a prompt is
    always prefilled as that same group (``attend``), so its bits depend on nothing else in the pass,
    and one call streams the weights once where blocks of ``size`` would stream them once a block
    (a 36-row prompt: 3 blocks). The other rows follow in blocks of ``size``, zero-padded.

    With ``whole`` (PassShape.whole: this machine's kernels give a row the same bits at any multiple of
    ``size`` rows), the rows are padded to a multiple of ``size`` and go through in calls of up to WHOLE_ROWS
    rows, groups and all.

    Attributes:
        size: rows per block (0 = no blocking: the fast, shape-dependent path of draft decoders).
        rows: real rows of the pass.
        groups: lengths of the leading one-call groups (none without blocking).
        padded: rows after padding (the groups, then a multiple of size).
    """

    def __init__(self, size: int, rows: int, groups: Sequence[int] = (), whole: bool = False):
        self.size, self.rows, self.whole = size, rows, whole
        self.groups = tuple(g for g in groups if g > 0) if size and not whole else ()
        lead = sum(self.groups)
        if lead > rows:
            raise ValueError(f"groups of {lead} rows in a pass of {rows}")
        self.padded = lead + -(-(rows - lead) // size) * size if size else rows

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, d) -> (padded, d), zero rows appended."""
        if self.padded == x.shape[0]:
            return x
        return torch.cat([x, x.new_zeros(self.padded - x.shape[0], *x.shape[1:])])

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """fn over x (padded, d_in) group by group, then block by block -> (padded, d_out)."""
        if not self.size or (x.shape[0] == self.size and not self.groups):
            return fn(x)
        if self.whole:  # x.shape[0] a multiple of size, as WHOLE_ROWS is
            outs = [fn(x[a : a + WHOLE_ROWS]) for a in range(0, x.shape[0], WHOLE_ROWS)]
            return outs[0] if len(outs) == 1 else torch.cat(outs)
        bounds = list(itertools.accumulate(self.groups, initial=0))
        calls = list(zip(bounds, bounds[1:]))  # the groups, then the blocks
        calls += [(i, i + self.size) for i in range(bounds[-1], x.shape[0], self.size)]
        outs = [fn(x[a:b]) for a, b in calls]
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    @property
    def calls(self) -> int:
        """Calls per row-wise function in blocks (``map`` without ``whole``)."""
        return len(self.groups) + (self.padded - sum(self.groups)) // self.size if self.size else 1


# A row's output differs between kernels only where their sums round to other bf16 values, a few outputs in
# 10^4: each row count is tried on calls that see at least this many outputs together.
PROBE_OUTPUTS = 32768
WHOLE_ROWS = 512  # rows per call of row-wise work with PassShape.whole (the largest count the probe tries)
# Row counts the probe tries, in blocks (a whole call has a multiple of the block's rows): every count up to
# 17 blocks, then around 32 and 64 (the kernels' blocking changes at powers of two), up to WHOLE_ROWS. One row
# alone is never a whole call: fc2 (2048 -> 512) gives it other bits in bf16 on an AMD EPYC (AVX512-BF16).
PROBE_BLOCKS = (*range(1, 18), 24, 31, 32, 33, 48, 63, 64)


def probe_rows(size: int) -> tuple[int, ...]:
    """The row counts whole_calls_keep_bits tries for blocks of size rows (WHOLE_ROWS a multiple of size)."""
    return tuple(sorted({b * size for b in PROBE_BLOCKS if b * size <= WHOLE_ROWS} | {WHOLE_ROWS}))


def whole_calls_keep_bits(
    fns: Sequence[tuple[Callable[[torch.Tensor], torch.Tensor], int]],  # (row-wise function, input width)
    size: int,
    dtype: torch.dtype,
    device: str | torch.device = "cpu",
    counts: Sequence[int] | None = None,
) -> bool:
    """Whether every function gives each row of a call of n rows, for every n in counts (default
    ``probe_rows(size)``), the bits it gets in blocks of ``size`` rows: a probe on random data (PassShape.whole
    None; the answer is kept per machine, models/row_calls.py). It tries row counts, not proofs: the counts are
    where kernels change, and the real-model tests (tests/integration/test_row_invariance.py, the lossless tests)
    check the engine's passes."""
    counts = probe_rows(size) if counts is None else counts
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for fn, width in fns:
            x = torch.randn(1, width, generator=gen).to(device=device, dtype=dtype)
            calls = -(-PROBE_OUTPUTS // fn(x).shape[-1])  # calls of one row that see PROBE_OUTPUTS outputs
            n = -(-(max(counts) + calls) // size) * size
            x = torch.randn(n, width, generator=gen).to(device=device, dtype=dtype)  # (n, width)
            ref = RowBlocks(size, n).map(fn, x)  # (n, out)
            for m in counts:
                for a in range(0, max(1, -(-calls // m)) * m, m):
                    if not torch.equal(fn(x[a : a + m]), ref[a : a + m]):
                        return False
    return True


def attend(
    q: torch.Tensor,  # (T, H, Dh): the sequence's query rows of this pass, at positions start .. start+T-1
    keys: torch.Tensor,  # (1, H, L, Dh): the cache (L = its capacity on the invariant path)
    values: torch.Tensor,  # (1, H, L, Dh)
    mask: torch.Tensor | None,  # (T, L) bool, True = attend; None = every key (plain path only)
    start: int = 0,  # position of the first row (invariant path)
    group: int = 0,  # leading rows attended together (the prompt)
    shape: "PassShape | None" = None,  # the key and query blocks; None = the plain path
) -> torch.Tensor:  # (T, H, Dh)
    """Causal self-attention of one sequence's rows.

    shape None: one call over all T rows and L keys with `mask` (fastest; the kernel depends on
    T). With a shape (batch-invariant): rows [0, group) in one call over the keys the group's last row reads;
    every later row in the block of ``shape.query_block`` positions that holds its own position
    (block b holds positions b*query_block ..), over the keys the block's last position reads,
    absent positions as zero queries. A row's block then depends on its position alone: its slot,
    its key length and its mask are the same in a one-token step, a verify pass or a batch. Blocks
    over the same key length go through ``stacked_attention`` together, each with its own bits.
    """
    if shape is None:
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask)  # (1, H, T, Dh)
        return out[0].transpose(0, 1)
    t, capacity, size = q.shape[0], keys.shape[2], shape.query_block
    out = q.new_empty(q.shape)
    if group:
        n = shape.key_length(start + group - 1, capacity)
        out[:group] = attend(q[:group], keys[:, :, :n], values[:, :, :n], causal_mask(start, group, n, q.device))
    first, end = start + group, start + t  # the later rows' positions: [first, end)
    if first == end:
        return out
    b_first = first - first % size  # the first block's first position
    count = -(-(end - b_first) // size)  # blocks
    rows = q[group:]
    if count * size != end - first:  # absent positions of the first and last block: zero queries
        before, after = first - b_first, b_first + count * size - end
        rows = torch.cat([q.new_zeros(before, *q.shape[1:]), rows, q.new_zeros(after, *q.shape[1:])])
    if count == 1:  # a one-token step, most often: its block alone
        n = shape.key_length(b_first + size - 1, capacity)
        got = _one_call(rows, keys[:, :, :n], values[:, :, :n], _block_mask(b_first, size, n, q.device))
        out[group:] = got[first - b_first : end - b_first]
        return out
    blocks = rows.reshape(count, size, *q.shape[1:])  # (count, size, H, Dh)
    lengths = [shape.key_length(b_first + (i + 1) * size - 1, capacity) for i in range(count)]
    got, i = [], 0
    for n, same in itertools.groupby(lengths):  # consecutive blocks over the same key length: one call
        j = i + len(list(same))
        masks = [_block_mask(b_first + b * size, size, n, q.device) for b in range(i, j)]  # (size, n) each
        masks = masks[0][None] if len(masks) == 1 else torch.stack(masks)  # (j - i, size, n)
        got.append(stacked_attention(blocks[i:j], keys[:, :, :n], values[:, :, :n], masks))
        i = j
    got = got[0] if len(got) == 1 else torch.cat(got)  # (count, size, H, Dh)
    out[group:] = got.reshape(-1, *q.shape[1:])[first - b_first : end - b_first]
    return out


def stacked_attention(
    blocks: torch.Tensor,  # (B, size, H, Dh): query blocks that read the same keys
    keys: torch.Tensor,  # (1, H, n, Dh)
    values: torch.Tensor,  # (1, H, n, Dh)
    masks: torch.Tensor | None,  # (B, size, n) bool, True = attend; None = every key
) -> torch.Tensor:  # (B, size, H, Dh)
    """Each block's attention, bitwise what a call of its own (``size`` query rows) gives.

    On CPU the blocks go in one call, placed where torch's kernel expects heads: its flash kernel
    computes one work item per (batch, head) pair, so a block's bits need not depend on its
    companions, and the blocks that read one head's keys run one after another while those keys are
    in cache (a 33-row cross-attention 1.36 against 1.91 ms in 33 calls, AMX Xeon). That holds where
    ``stacking_keeps_bits`` finds it so on this machine (an earlier torch on an AMD EPYC gave a
    float32 query other bits in a batch than alone); elsewhere, and on CUDA (whose kernels split the
    keys by the number of work items), each block keeps a call of its own.
    """
    count, size, heads, dim = blocks.shape
    cpu = blocks.device.type == "cpu"
    if count > 1 and cpu and stacking_keeps_bits(blocks.dtype, heads, dim, size, masks is not None):
        return _stacked_call(blocks, keys, values, masks)
    outs = [_one_call(b, keys, values, None if masks is None else masks[i]) for i, b in enumerate(blocks)]
    return outs[0][None] if len(outs) == 1 else torch.stack(outs)


@functools.cache
def stacking_keeps_bits(dtype: torch.dtype, heads: int, dim: int, size: int, masked: bool) -> bool:
    """Whether torch's CPU attention gives a query block stacked with others (``stacked_attention``) the
    bits it gets alone, on this machine, for blocks of this dtype and shape: a probe on random data over
    600 keys (two of the kernel's key blocks), at 2 and 9 blocks. Read once per shape (2-3 ms, AMX Xeon)."""
    gen = torch.Generator().manual_seed(0)
    n = 600

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    keys, values = rand(1, heads, n, dim), rand(1, heads, n, dim)
    for count in (2, 9):
        blocks = rand(count, size, heads, dim)
        masks = None
        if masked:
            masks = torch.stack([causal_mask((131 * i + 50) % (n - size), size, n, "cpu") for i in range(count)])
        got = _stacked_call(blocks, keys, values, masks)
        for i in (0, count - 1):
            if not torch.equal(got[i], _one_call(blocks[i], keys, values, None if masks is None else masks[i])):
                return False
    return True


def _stacked_call(blocks: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                  masks: torch.Tensor | None) -> torch.Tensor:
    """Query blocks (B, size, H, Dh) over the same keys and values (1, H, n, Dh) in one call, masks (B, size, n) ->
    (B, size, H, Dh): heads as the batch, blocks as the heads, keys and values expanded without a copy."""
    count = blocks.shape[0]
    got = F.scaled_dot_product_attention(
        blocks.permute(2, 0, 1, 3),  # (H, B, size, Dh)
        keys[0][:, None].expand(-1, count, -1, -1),  # (H, B, n, Dh)
        values[0][:, None].expand(-1, count, -1, -1),
        attn_mask=None if masks is None else masks[None],  # (1, B, size, n)
    )  # (H, B, size, Dh)
    return got.permute(1, 2, 0, 3)


def _one_call(block: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """One query block's attention: block (size, H, Dh), keys, values (1, H, n, Dh), mask (size, n) -> (size, H, Dh)."""
    return F.scaled_dot_product_attention(block.transpose(0, 1)[None], keys, values, attn_mask=mask)[0].transpose(0, 1)


def causal_mask(first: int, rows: int, keys: int, device: torch.device | str) -> torch.Tensor:
    """(rows, keys) bool: row i (position first + i) attends to positions <= first + i."""
    return torch.arange(keys, device=device)[None] <= torch.arange(first, first + rows, device=device)[:, None]


# a query block's mask depends on its first position only (at most n_ctx / query_block of them);
# a prompt's mask is built once per prompt, uncached
_block_mask = functools.lru_cache(maxsize=512)(causal_mask)


def attend_blocks(
    q: torch.Tensor,  # (T, H, Dh): the sequence's query rows of this pass
    keys: torch.Tensor,  # (1, H, S, Dh): every row reads all of them (cross-attention)
    values: torch.Tensor,  # (1, H, S, Dh)
    block: int,  # query rows per call
    group: int = 0,  # leading rows attended together in one call (the prompt, as in ``attend``)
) -> torch.Tensor:  # (T, H, Dh)
    """Attention without a mask: rows [0, group) in one call, the others in calls of exactly `block`
    query rows (the last zero-padded)."""
    if group:
        head = attend(q[:group], keys, values, None)  # (group, H, Dh)
        return head if group == q.shape[0] else torch.cat([head, attend_blocks(q[group:], keys, values, block)])
    t = q.shape[0]
    padded = RowBlocks(block, t).pad(q)  # (T_pad, H, Dh)
    if t <= block:  # a one-token step, most often: one block
        return _one_call(padded, keys, values, None)[:t]
    got = stacked_attention(padded.view(-1, block, *q.shape[1:]), keys, values, None)  # (blocks, block, H, Dh)
    return got.reshape(-1, *q.shape[1:])[:t]


def cross_attend_plain(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Cross-attention of a plain (not batch-invariant) pass: a draft's steps. q (T, H, Dh), keys and
    values (1, H, S, Dh) -> (T, H, Dh). On CPUs without AMX in bf16/fp16, torch's fused attention for a
    query of a few rows is slow (about 1 ms for 1 row over 1500 keys, against 0.33 ms for two matmuls
    and a float32 softmax, 2-core EPYC): those go the explicit way (``cross_attend_explicit``). On AMX
    the fused kernel is the faster one (a shipped draft's step 2.19 against 2.51 ms, 2-core Xeon,
    benchmarks/xeon-amx/bench_draft_step.json); everything else takes it too."""
    if q.device.type == "cpu" and q.dtype != torch.float32 and q.shape[0] <= 8 and few_row_attention_is_slow():
        return cross_attend_explicit(q, keys, values)
    return attend(q, keys, values, None)


def cross_attend_explicit(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Cross-attention as two matmuls and a float32 softmax: q (T, H, Dh), keys, values (1, H, S, Dh) -> (T, H, Dh)."""
    scores = (q.transpose(0, 1) @ keys[0].transpose(-1, -2)) * (q.shape[-1] ** -0.5)  # (H, T, S)
    return (torch.softmax(scores.float(), dim=-1).to(q.dtype) @ values[0]).transpose(0, 1)


@functools.cache
def few_row_attention_is_slow() -> bool:
    """Whether torch's fused CPU attention is slow for a reduced-precision query of a few rows here: on
    CPUs without AMX (measured on AVX512-BF16 EPYC and Xeon), not with it. A fact of the machine, read once."""
    from specscribe.models.compute import cpu_has_amx

    return not cpu_has_amx()
