"""Training examples for the draft: labelled sequences as tensors (``Example``), the encoder outputs and
cross-attention K/V they read (``EncoderCache``, ``CrossCache``), and right-padded batches (``collate``).
Used by offline training (models/distill/train.py, feature_net.py) and online adaptation (models/adapt.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from specscribe.models.distill.labels import LabelledSequence
from specscribe.models.distill.net import DraftNet
from specscribe.models.draft import draft_group


@dataclass(frozen=True)
class Example:
    """One training sequence, as tensors.

    Attributes:
        item: encoder-output key.
        inputs: (L,) long decoder input (prompt + tokens).
        start: first position whose prediction is trained (len(prompt) - 1).
        targets: (n+1,) long label (tokens + eot).
        topk_values, topk_indices: (n+1, k) the target's top-k filtered logits and ids.
        group: "en-transcribe", "xx-transcribe" or "xx-translate", for per-group metrics.
    """

    item: str
    inputs: torch.Tensor
    start: int
    targets: torch.Tensor
    topk_values: torch.Tensor
    topk_indices: torch.Tensor
    group: str


def load_examples(folder: Path, sequences: Sequence[LabelledSequence], eot: int) -> list[Example]:
    out = []
    for s in sequences:
        z = np.load(Path(folder) / "labels" / "topk" / f"{s.seq}.npz")
        group = draft_group(s.lang, s.task)
        out.append(
            Example(
                item=s.item,
                inputs=torch.tensor(list(s.prompt) + list(s.tokens), dtype=torch.long),
                start=len(s.prompt) - 1,
                targets=torch.tensor(list(s.tokens) + [eot], dtype=torch.long),
                topk_values=torch.from_numpy(z["values"].astype(np.float32)),
                topk_indices=torch.from_numpy(z["indices"].astype(np.int64)),
                group=group,
            )
        )
    return out


class EncoderCache:
    """Encoder outputs (S, d) by item, loaded once from FOLDER/labels/enc/ITEM.npy and kept as fp16.

    Several dataset folders may be given; an item is read from the first folder that has it.
    """

    def __init__(self, folder: Path | Sequence[Path]):
        folders = [folder] if isinstance(folder, (str, Path)) else list(folder)
        self.folders = [Path(f) / "labels" / "enc" for f in folders]
        self._cache: dict[str, torch.Tensor] = {}

    def get(self, item: str) -> torch.Tensor:
        if item not in self._cache:
            path = next((f / f"{item}.npy" for f in self.folders if (f / f"{item}.npy").exists()), None)
            if path is None:
                raise FileNotFoundError(f"no encoder output for {item} in {[str(f) for f in self.folders]}")
            self._cache[item] = torch.from_numpy(np.load(path))
        return self._cache[item]


class CrossCache:
    """The draft's cross-attention K/V per item (fp16), computed once: with frozen K/V projections
    they never change, so training skips their cost after the first epoch."""

    def __init__(self, net: DraftNet, encoders: EncoderCache):
        self.net, self.encoders = net, encoders
        self._cache: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def batch(self, items: Sequence[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (K, V), each (B, H, S, Dh) float32, for the items in order."""
        for item in items:
            if item not in self._cache:
                enc = self.encoders.get(item).float().unsqueeze(0).to(self.net.embedding.device)  # (1, S, d)
                self._cache[item] = [(k.half(), v.half()) for k, v in self.net.cross_keys_values(enc)]
        per_layer = zip(*(self._cache[item] for item in items))
        return [(torch.cat([k for k, _ in kv]).float(), torch.cat([v for _, v in kv]).float()) for kv in per_layer]

    def forget(self, item: str) -> None:
        """Drop an item's K/V (an online buffer evicting a window)."""
        self._cache.pop(item, None)


@dataclass(frozen=True)
class Batch:
    """Right-padded examples.

    Attributes:
        tokens: (B, L) long inputs, padded with 0.
        enc: (B, S, d) float32 encoder outputs.
        mask: (B, L) bool, True where a prediction is trained.
        targets: (B, L) long label at trained positions (-100 elsewhere), in head ids.
        topk_values: (B, L, k) float32 (NEG at untrained positions).
        topk_indices: (B, L, k) long, in head ids (-1 where outside the head's vocabulary).
    """

    tokens: torch.Tensor
    enc: torch.Tensor
    mask: torch.Tensor
    targets: torch.Tensor
    topk_values: torch.Tensor
    topk_indices: torch.Tensor


def collate(
    examples: Sequence[Example], encoders: EncoderCache, head_index: torch.Tensor | None, device: str = "cpu"
) -> Batch:
    """head_index: (V,) long map from token id to head row (-1: not in the head), None = identity."""
    b, length, k = len(examples), max(len(e.inputs) for e in examples), examples[0].topk_values.shape[1]
    tokens = torch.zeros(b, length, dtype=torch.long)
    mask = torch.zeros(b, length, dtype=torch.bool)
    targets = torch.full((b, length), -100, dtype=torch.long)
    values = torch.full((b, length, k), -1.0e4)
    indices = torch.full((b, length, k), -1, dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.targets)
        tokens[i, : len(e.inputs)] = e.inputs
        rows = slice(e.start, e.start + n)
        mask[i, rows] = True
        tgt, idx = e.targets, e.topk_indices
        if head_index is not None:
            tgt, idx = head_index[tgt], head_index[idx]
        targets[i, rows] = torch.where(tgt >= 0, tgt, torch.full_like(tgt, -100))
        values[i, rows] = torch.where(idx >= 0, e.topk_values, torch.full_like(e.topk_values, -1.0e4))
        indices[i, rows] = idx
    enc = torch.stack([encoders.get(e.item) for e in examples]).float()
    parts = (tokens, enc, mask, targets, values, indices)
    return Batch(*(t.to(device) for t in parts))
