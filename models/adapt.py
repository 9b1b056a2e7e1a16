"""Online adaptation of the draft (`--adapt-draft`): the target's own outputs on the audio at hand
become the draft's training examples, and the draft learns in the model's idle time.

    adapter = DraftAdapter(target, checkpoint, target_sha256, eot, session_for, install, AdaptOptions())
    adapter.observe(encoded, prompt, tokens, rules, group)   # after a greedy decode: cheap
    while adapter.pending():                                  # only when no decode waits
        adapter.work()                                        # one unit: a label, a step or a check

- ``observe`` only queues the window (its encoder output and the decode's prompt and tokens).
- ``work`` does one short unit: label one queued window by one teacher-forced target pass (its
  top-k logits and hidden states, as the offline label stage: distill/labels.py), or one AdamW
  step on the buffer of recent windows (distill/train.py's loss), or, every ``check_every`` steps,
  the gate: the trained state against the served one on held-back recent windows (every
  ``holdout_every``-th labelled window, never trained on). Only a state that wins by
  ``min_gain`` is swapped in (``install``), and saved (``save``: a checkpoint --draft-model loads,
  refused for another target as any draft is).
- Steps are earned: each labelled training window gives ``steps_per_window`` steps, so the draft
  does not overfit a quiet stream's last few windows and idle CPU stays idle.

The target verifies every drafted token, so adaptation changes the speed only, never the text.
Callers (pipeline/scheduler.py, pipeline/lanes.py) call ``work`` only when no decode waits.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdaptOptions:
    """Attributes: lr (AdamW, constant); batch_size (windows per step); buffer (labelled training
    windows kept, oldest dropped); holdout_every (every n-th labelled window is held back);
    holdout (held-back windows kept); steps_per_window (steps a labelled window earns);
    check_every (steps between gate checks); min_gain (acceptance points, as a fraction, a
    candidate must win by); queue (unlabelled windows waiting at most, oldest dropped); top_k
    (target logits kept per position); save (where a swapped-in state is written, None: nowhere)."""

    lr: float = 1e-4
    batch_size: int = 2
    buffer: int = 24
    holdout_every: int = 4
    holdout: int = 6
    steps_per_window: int = 4
    check_every: int = 8
    min_gain: float = 0.01
    queue: int = 8
    top_k: int = 32
    save: str | None = None


@dataclass(frozen=True)
class Observation:
    """A finished greedy decode: encoder output (1, S, d), prompt, tokens (no end-of-text), the
    request's logit rules and its group ("en-transcribe", "xx-transcribe", "xx-translate")."""

    enc: torch.Tensor
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    rules: object
    group: str


@dataclass
class AdaptStats:
    """Counters for logs and benchmarks (milliseconds are totals)."""

    observed: int = 0
    dropped: int = 0
    labelled: int = 0
    held_out: int = 0
    steps: int = 0
    checks: int = 0
    swaps: int = 0
    label_ms: float = 0.0
    step_ms: float = 0.0
    check_ms: float = 0.0
    longest_unit_ms: float = 0.0
    scores: list = field(default_factory=list)  # (step, candidate, served) per check

    def to_dict(self) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


class _Encoders:
    """In-memory encoder outputs (S, d) float16 by item: what train.py's EncoderCache reads."""

    def __init__(self) -> None:
        self._items: dict[str, torch.Tensor] = {}

    def put(self, item: str, enc: torch.Tensor) -> None:
        self._items[item] = enc

    def get(self, item: str) -> torch.Tensor:
        return self._items[item]

    def drop(self, item: str) -> None:
        self._items.pop(item, None)


class DraftAdapter:
    """Trains a copy of the served draft on the target's outputs; swaps it in when it is better.

    target: the engine's TextDecoder; checkpoint: the served draft's file (its layers are read
    from it, in float32); session_for(enc) -> a fresh target DecoderSession on enc (1, S, d);
    install(net) -> puts an inference draft built from the trained net in service.
    """

    def __init__(self, target, checkpoint: Path, target_sha256: str, eot: int,
                 session_for: Callable[[torch.Tensor], object], install: Callable[[object], None],
                 options: AdaptOptions = AdaptOptions(), device: str = "cpu", seed: int = 0) -> None:
        from specscribe.models.distill.export import load_draft_into
        from specscribe.models.distill.examples import CrossCache
        from specscribe.models.distill.train import TrainOptions, head_index_of

        self.options, self.session_for, self.install, self.eot = options, session_for, install, eot
        self.target, self.target_sha256, self.checkpoint = target, target_sha256, Path(checkpoint)
        self.net, self.feature = _trainable_net(target, self.checkpoint)
        self.meta = load_draft_into(self.net, self.checkpoint)
        if device != "cpu":
            self.net.to_device(device)
        self.net.train()
        self._train_options = TrainOptions(feature=self.feature, device=device)  # loss weights, autocast
        self._head_index = head_index_of(self.net.vocab_ids, self.net.embedding.shape[0])
        self._opt = torch.optim.AdamW(self.net.trainable_parameters(), lr=options.lr, weight_decay=0.0)
        self._encoders = _Encoders()
        self._crosses = CrossCache(self.net, self._encoders)  # frozen cross K/V: the served state's too
        self._served = _state(self.net)
        self._queue: collections.deque[Observation] = collections.deque()
        self._train: collections.deque = collections.deque()
        self._holdout: collections.deque = collections.deque()
        self._credit = 0
        self._check_due = False
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.stats = AdaptStats()

    # --- cheap, from the decode's side ------------------------------------------------------
    def observe(self, enc: torch.Tensor, prompt: Sequence[int], tokens: Sequence[int], rules, group: str) -> None:
        """Queue a finished greedy decode of enc (1, S, d) for labelling (no model work here)."""
        with self._lock:
            if len(self._queue) >= self.options.queue:
                self._queue.popleft()  # the oldest: adapt to what is being said now
                self.stats.dropped += 1
            self._queue.append(Observation(enc, tuple(prompt), tuple(tokens), rules, group))
            self.stats.observed += 1

    def pending(self) -> bool:
        """Whether ``work`` has something to do."""
        with self._lock:
            return bool(self._queue) or self._check_due or (self._credit > 0 and bool(self._train))

    def drain(self) -> int:
        """Run units until nothing is pending (bounded: queued windows and earned steps); their count."""
        n = 0
        while self.pending():
            self.work()
            n += 1
        return n

    # --- one unit of work, on the model's thread when it is idle ---------------------------
    def work(self) -> str | None:
        """One unit: "label", "check" (the gate, due every check_every steps), "step", or None."""
        started = time.perf_counter()
        with self._lock:
            obs = self._queue.popleft() if self._queue else None
        if obs is not None:
            self._label(obs)
            kind = "label"
            self.stats.label_ms += (time.perf_counter() - started) * 1e3
        elif self._check_due:
            self._check_due = False
            self._check()
            kind = "check"
            self.stats.check_ms += (time.perf_counter() - started) * 1e3
        elif self._credit > 0 and self._train:
            self._step()
            kind = "step"
            self.stats.step_ms += (time.perf_counter() - started) * 1e3
            self._check_due = self.stats.steps % self.options.check_every == 0 and bool(self._holdout)
        else:
            return None
        self.stats.longest_unit_ms = max(self.stats.longest_unit_ms, (time.perf_counter() - started) * 1e3)
        return kind

    def _label(self, obs: Observation) -> None:
        from specscribe.models.distill.feature_net import FeatureExample
        from specscribe.models.distill.labels import teacher_forced
        from specscribe.models.distill.examples import Example

        with torch.no_grad():
            values, indices, states = teacher_forced(self.session_for(obs.enc), obs.prompt, obs.tokens, obs.rules,
                                                     self.options.top_k)
        item = f"w{self.stats.labelled}"
        self.stats.labelled += 1
        example = Example(
            item=item,
            inputs=torch.tensor(obs.prompt + obs.tokens, dtype=torch.long),
            start=len(obs.prompt) - 1,
            targets=torch.tensor(obs.tokens + (self.eot,), dtype=torch.long),
            topk_values=values,
            topk_indices=indices.long(),
            group=obs.group,
        )
        self._encoders.put(item, obs.enc[0].to(torch.float16).cpu())  # (S, d)
        entry = FeatureExample(example, states) if self.feature else example
        held = self.stats.labelled % self.options.holdout_every == 0
        with self._lock:
            pool, size = (self._holdout, self.options.holdout) if held else (self._train, self.options.buffer)
            pool.append(entry)
            if len(pool) > size:
                self._forget(pool.popleft())
            if held:
                self.stats.held_out += 1
            else:
                self._credit += self.options.steps_per_window

    def _forget(self, entry) -> None:
        self._encoders.drop(entry.item)
        self._crosses.forget(entry.item)

    def _step(self) -> None:
        from specscribe.models.distill.train import example_loss

        with self._lock:
            first = self._rng.choice(list(self._train))
            # one batch, one encoder length (streaming encodes shorter windows: --encoder-pad)
            alike = [e for e in self._train if e is not first and self._frames(e) == self._frames(first)]
            chunk = [first] + self._rng.sample(alike, min(self.options.batch_size - 1, len(alike)))
            self._credit -= 1
        loss, _ = example_loss(self.net, chunk, self._encoders, self._crosses, self._head_index, self._train_options)
        self._opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.trainable_parameters(), 1.0)
        self._opt.step()
        self.stats.steps += 1

    def _frames(self, entry) -> int:
        return int(self._encoders.get(entry.item).shape[0])

    def score(self) -> tuple[float, float]:
        """(trained, served) agreement with the target on the held-back windows: the mean over the
        draft steps of teacher-forced top-1 agreement (feature drafts: from the target's state,
        then from its own), as the offline validation measures."""
        by_length: dict[int, list] = {}
        for entry in self._holdout:
            by_length.setdefault(self._frames(entry), []).append(entry)
        groups = list(by_length.values())
        trained = _agreement(self.net, groups, self._encoders, self._crosses, self.feature)
        with self._served_weights():
            served = _agreement(self.net, groups, self._encoders, self._crosses, self.feature)
        return trained, served

    @contextlib.contextmanager
    def _served_weights(self):
        """The net holds the served state inside the block, its trained state again after."""
        trained = _state(self.net)
        self.net.load_state_dict(self._served)
        try:
            yield
        finally:
            self.net.load_state_dict(trained)

    def _check(self) -> None:
        trained, served = self.score()
        self.stats.checks += 1
        self.stats.scores.append((self.stats.steps, round(trained, 4), round(served, 4)))
        if trained < served + self.options.min_gain:
            return
        self._served = _state(self.net)
        self.install(self.net)
        self.stats.swaps += 1
        log.info("adapted draft swapped in: %.3f -> %.3f on %d held-back windows", served, trained, len(self._holdout))
        if self.options.save:
            self.save(Path(self.options.save))

    def save(self, path: Path) -> Path:
        """Write the served state as a draft checkpoint (atomically; --draft-model loads it)."""
        from specscribe.models.distill.export import export_draft

        training = json.loads(self.meta.get("training") or "{}")
        summary = {"val": training.get("val", {}), "adapted_from": str(self.checkpoint), "adapt": self.stats.to_dict()}
        with self._served_weights():
            return export_draft(self.net, path, self.target, self.target_sha256, summary)


def _state(net) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _agreement(net, groups: list[list], encoders, crosses, feature: bool) -> float:
    """Teacher-forced agreement over groups of examples of one encoder length each, weighted by positions."""
    from specscribe.models.distill.feature_net import evaluate_features
    from specscribe.models.distill.train import evaluate

    total = positions = 0.0
    for examples in groups:
        if feature:
            report = evaluate_features(net, examples, encoders, crosses)
            score = sum(report["steps"]) / len(report["steps"])
        else:
            report = evaluate(net, examples, encoders, crosses=crosses)
            score = report.get("acceptance", 0.0)
        total += score * report.get("positions", 0)
        positions += report.get("positions", 0)
    return total / positions if positions else 0.0


def _trainable_net(target, checkpoint: Path):
    """(float32 DraftNet or FeatureDraftNet shaped as the checkpoint, is_feature); weights not loaded."""
    from safetensors import safe_open

    from specscribe.models.distill.feature_net import FeatureDraftNet
    from specscribe.models.distill.net import DraftNet
    from specscribe.models.whisper import DecoderLayer

    with safe_open(str(checkpoint), framework="pt") as fh:
        meta = fh.metadata() or {}
    sources = json.loads(meta["layer_sources"])
    dims = json.loads(meta["dims"])
    d, heads = dims["n_text_state"], dims["n_text_head"]
    layers = [DecoderLayer(d, heads, 4 * d) for _ in sources]
    feature = meta.get("kind") == "feature"
    kind = FeatureDraftNet if feature else DraftNet
    return kind(target, sources, None, meta.get("shared_cross_kv") == "true", layers=layers), feature


def served_draft(net, target, old, compute_type: str):
    """An inference DraftDecoder (models/draft.py) from a trained net, ready as load_draft_decoder's."""
    import copy

    from torch import nn

    from specscribe.models.draft import DraftDecoder, fit_to_target
    from specscribe.models.draft_loading import prepare_draft

    layers = nn.ModuleList(copy.deepcopy(layer) for layer in net.layers).requires_grad_(False)
    fuse = getattr(net, "fuse", None)
    fuse = None if fuse is None else copy.deepcopy(fuse).requires_grad_(False)
    layers, fuse = fit_to_target(target, layers, fuse)
    draft = DraftDecoder(target, list(layers), net.source_layers, net.vocab_ids, fuse)
    draft.shared_cross_kv, draft.checkpoint, draft.target_sha256 = old.shared_cross_kv, old.checkpoint, old.target_sha256
    draft.group_acceptance = dict(old.group_acceptance)
    return prepare_draft(draft, compute_type)
