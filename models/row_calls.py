"""Whether a target pass's row-wise work may run in whole calls here (PassShape.whole), probed once per machine.

A batch-invariant pass runs its LayerNorms, linears and output head in blocks of ``PassShape.rows`` rows, so
that a row's bits never depend on how many rows share the pass (models/invariant.py). Each block re-reads every
weight: a pass of 16 sequences in blocks of 8 reads the 53 MB bf16 output head 20 times or more. Where the
CPU's kernels give a row the same bits at every multiple of the block's rows, one call over all rows does the
same work for the price of one weight read (bf16, 160 rows, 2-core AMD EPYC with AVX512-BF16: the head
20 ms against 39 ms in blocks of 8). Whether they do is a fact of the CPU, the torch build, the thread count,
the dtype and the layer shapes, so the probe's answer is kept under that key in
``specscribe_home()/cache/row_calls.json``: the probe (about 1 s for base, most of it the head) runs once per
machine, at the first pass that needs more than one call.

    whole_calls_ok(decoder, rows) -> bool
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import torch

from specscribe.machine import cpu_flags, cpu_model, cpu_signature
from specscribe.models.invariant import whole_calls_keep_bits

log = logging.getLogger(__name__)
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")  # the flags that pick kernels


def probe_key(decoder, rows: int) -> str:
    """What the answer depends on: CPU, torch, threads, dtype, layer shapes, block rows."""
    layer, weight = decoder.layers[0], decoder.positional_embedding
    flags = sorted(cpu_flags() & set(FLAGS))
    shapes = f"d{weight.shape[1]} ff{layer.mlp.fc2.in_features} v{decoder.proj.out_features}"
    linears = "+".join(sorted({type(m).__name__ for m in (layer.qkv, layer.mlp.fc2, decoder.proj)}))
    return (f"{cpu_model()} {cpu_signature()} {','.join(flags)} | torch {torch.__version__} threads "
            f"{torch.get_num_threads()} | {weight.dtype} {weight.device.type} {linears} {shapes} | rows {rows}")


def row_wise_functions(decoder) -> list[tuple]:
    """(function, input width) of each row-wise call of a pass, as DecoderLayer.forward and the head make them."""
    layer, d = decoder.layers[0], decoder.positional_embedding.shape[1]
    return [(lambda b: layer.qkv(layer.attn_ln(b)), d), (layer.out, d),
            (lambda b: layer.cross_q(layer.cross_ln(b)), d), (layer.cross_out, d),
            (lambda b: layer.mlp(layer.mlp_ln(b)), d), (layer.mlp.fc2, layer.mlp.fc2.in_features),
            (lambda b: decoder.proj(decoder.ln(b)), d)]


def whole_calls_ok(decoder, rows: int, cache: Path | None = None) -> bool:
    """The probe's answer for this decoder's passes in blocks of rows, from the cache file or probed now."""
    from specscribe.models.registry import specscribe_home

    path = cache or specscribe_home() / "cache" / "row_calls.json"
    key = probe_key(decoder, rows)
    try:
        known = json.loads(path.read_text())
        if isinstance(known.get(key), bool):
            return known[key]
    except (OSError, ValueError, AttributeError):  # absent or unreadable: probe
        known = {}
    weight = decoder.positional_embedding
    ok = whole_calls_keep_bits(row_wise_functions(decoder), rows, weight.dtype, weight.device)
    log.debug("row-wise work in whole calls: %s (%s)", ok, key)
    known = known if isinstance(known, dict) else {}
    known[key] = ok
    try:  # another process may write too: each writes a whole file, the last one wins
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".row_calls.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(known, f, indent=1)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only home: probe again next time
        log.debug("row_calls: cannot keep the probe's answer in %s: %s", path, exc)
    return ok
