"""The feature-level draft (EAGLE-style) as trained: it reads the target's own hidden states.

At decoder position q the target reads token x_q, computes its final-LN hidden state H_q and
predicts x_{q+1} from it. The feature draft reads (H_{q-1}, x_q): the target's state one position
back, the one that chose x_q (zeros at the prompt's positions, which no state chose), fused to one
vector with the token's embedding, then copies of target decoder layers (cross-attention to the
encoder output), the target's final LN and the (reduced) tied head. It predicts x_{q+1}, and its
final-LN output is its guess of H_q, which the next draft step reads (models/feature_draft.py).
Its fuse starts as [0 | I], so before training it is the draft decoder on the same layers
(net.py), and it is trained on the same positions, so the two compare directly.

Training examples come from the label stage: ``feat/SEQ.npy`` holds H at positions
len(prompt)-1 .. len(prompt)-1+n (n+1 rows, aligned with the top-k rows).
Loss: the distillation loss of train.py on the tokens, plus ``feature_weight`` x smooth-L1 of the
predicted states, over one step from the target's states and (``unroll`` 2) a second step in which
each position from the second generated token on reads the state the first step predicted one
position back, as drafting beyond the first token of a round does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from specscribe.models.distill.labels import LabelledSequence
from specscribe.models.distill.net import DraftNet, layer_forward
from specscribe.models.distill.examples import Batch, EncoderCache, Example, collate, load_examples
from specscribe.models.distill.train import distill_loss
from specscribe.models.whisper import TextDecoder


class FeatureDraftNet(DraftNet):
    """DraftNet plus ``fuse`` (2d -> d) over [target state, token embedding] (models/feature_draft.py
    ``initial_fuse``: the state not read yet)."""

    def __init__(self, target: TextDecoder, source_layers: Sequence[int] = (0, -1),
                 vocab_ids: torch.Tensor | None = None, freeze_cross_kv: bool = True,
                 layers: Sequence | None = None):
        super().__init__(target, source_layers, vocab_ids, freeze_cross_kv, layers)
        from specscribe.models.feature_draft import initial_fuse

        self.fuse = initial_fuse(self.embedding)

    def step(self, tokens: torch.Tensor, states: torch.Tensor, cross: list) -> torch.Tensor:
        """tokens (B, L), states (B, L, d) the state each position reads -> final-LN outputs (B, L, d)."""
        x = self.fuse(states, F.embedding(tokens, self.embedding))
        x = x + self._positions[0][: tokens.shape[1]]  # (B, L, d)
        for layer, (ck, cv) in zip(self.layers, cross):
            x = layer_forward(layer, x, ck, cv)
        return self._ln[0](x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., d) -> (..., N) over the head's vocabulary."""
        return hidden @ self.head.to(hidden.dtype).T

    def text_decoder(self, target: TextDecoder) -> TextDecoder:
        import copy

        decoder = super().text_decoder(target)
        decoder.fuse = copy.deepcopy(self.fuse).eval()
        return decoder


@dataclass(frozen=True)
class FeatureExample:
    """A labelled sequence with the target's states. base: its Example (tokens, top-k, group);
    states: (n+1, d) float16, H at positions len(prompt)-1 ..."""

    base: Example
    states: torch.Tensor

    @property
    def item(self) -> str:
        return self.base.item

    @property
    def group(self) -> str:
        return self.base.group


def load_feature_examples(folder: Path, sequences: Sequence[LabelledSequence], eot: int) -> list[FeatureExample]:
    """Examples of ``sequences`` (in order) with their ``labels/feat/SEQ.npy``."""
    feat_dir = Path(folder) / "labels" / "feat"
    missing = [s.seq for s in sequences if not (feat_dir / f"{s.seq}.npy").exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} sequences have no {feat_dir}/SEQ.npy (labelled before feature "
                                f"states were kept): label the dataset again, e.g. {missing[0]}")
    examples = load_examples(folder, sequences, eot)
    return [FeatureExample(e, torch.from_numpy(np.load(feat_dir / f"{s.seq}.npy"))) for s, e in zip(sequences, examples)]


@dataclass(frozen=True)
class FeatureBatch:
    """examples.Batch plus the states: ``states`` (B, L, d) what each position reads (H_{q-1}; zeros
    in the prompt and padding), ``target_states`` (B, L, d) H_q at the trained positions, and
    ``own`` (B, L) the positions a second draft step reads a guessed state at (the second
    generated token on)."""

    batch: Batch
    states: torch.Tensor
    target_states: torch.Tensor
    own: torch.Tensor


def collate_features(examples: Sequence[FeatureExample], encoders: EncoderCache, head_index: torch.Tensor | None,
                     device: str = "cpu") -> FeatureBatch:
    batch = collate([e.base for e in examples], encoders, head_index, device)
    b, length = batch.tokens.shape
    d = examples[0].states.shape[1]
    states, target_states = torch.zeros(b, length, d), torch.zeros(b, length, d)
    own = torch.zeros(b, length, dtype=torch.bool)
    for i, fe in enumerate(examples):
        start, st = fe.base.start, fe.states.float()  # st (n+1, d): H at start .. start+n
        n = len(st) - 1
        target_states[i, start : start + n + 1] = st
        states[i, start + 1 : start + 1 + n] = st[:n]
        own[i, start + 2 : start + 1 + n] = True
    return FeatureBatch(batch, states.to(device), target_states.to(device), own.to(device))


def unrolled(net: FeatureDraftNet, fb: FeatureBatch, cross: list, unroll: int) -> list[torch.Tensor]:
    """Final-LN outputs (B, L, d) per step s = 1..unroll: step 1 reads the target's states, step s
    reads at the ``own`` positions what step s-1 predicted one position back."""
    out, states = [], fb.states
    for _ in range(unroll):
        hidden = net.step(fb.batch.tokens, states, cross)
        out.append(hidden)
        guessed = torch.cat([torch.zeros_like(hidden[:, :1]), hidden[:, :-1]], dim=1)  # (B, L, d)
        states = torch.where(fb.own.unsqueeze(-1), guessed, fb.states)
    return out


def feature_loss(net: FeatureDraftNet, fb: FeatureBatch, cross: list, kl_weight: float, feature_weight: float,
                 unroll: int) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum over the unrolled steps (step s weighted 1/s) of distill_loss + feature_weight x smooth-L1."""
    mask = fb.batch.mask
    total, parts = 0.0, {"kl": 0.0, "ce": 0.0, "feature": 0.0}
    for s, hidden in enumerate(unrolled(net, fb, cross, unroll), start=1):
        loss, p = distill_loss(net.logits(hidden[mask]), fb.batch, kl_weight)
        reg = F.smooth_l1_loss(hidden[mask].float(), fb.target_states[mask])
        total = total + (loss + feature_weight * reg) / s
        for key, value in (("kl", p["kl"]), ("ce", p["ce"]), ("feature", float(reg.detach()))):
            parts[key] += value / unroll
    return total, parts


def evaluate_features(net: FeatureDraftNet, examples: Sequence[FeatureExample], encoders: EncoderCache, crosses,
                      batch_size: int = 8, unroll: int = 2) -> dict:
    """train.evaluate's report (teacher-forced agreement, from the target's states, at the same
    positions as a draft decoder's) plus ``steps``: the agreement at each unrolled step."""
    from specscribe.models.distill.metrics import acceptance_report
    from specscribe.models.distill.train import head_index_of

    head_index = head_index_of(net.vocab_ids, net.embedding.shape[0])
    matches, hits, counts = [], [0] * unroll, 0
    net.eval()
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            fb = collate_features(chunk, encoders, head_index, str(net.embedding.device))
            mask, targets = fb.batch.mask, fb.batch.targets
            flags = [(net.logits(h).argmax(-1) == targets) & mask & (targets >= 0)
                     for h in unrolled(net, fb, crosses.batch([e.item for e in chunk]), unroll)]
            for s, ok in enumerate(flags):
                hits[s] += int(ok.sum())
            counts += int(mask.sum())
            matches += [(e.group, flags[0][j][mask[j]].tolist()) for j, e in enumerate(chunk)]
    net.train()
    report = acceptance_report(matches)
    report["steps"] = [round(h / max(1, counts), 4) for h in hits]
    return report
