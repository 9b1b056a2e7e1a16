"""Pseudo-labels from the target: greedy transcripts (with and without timestamps, transcribe and
translate), the target's top-k next-token distribution at every label position, and the encoder
output of each window (fp16), so training never runs the encoder.

Layout under ``DATA/labels``:
    labels.jsonl        one row per decode (kept or filtered, with the reason)
    enc/ITEM.npy        encoder output (S, d) float16
    topk/SEQ.npz        values (n+1, k) float16 (filtered logits), indices (n+1, k) int32
    feat/SEQ.npy        (n+1, d) float16: the target's final-LN hidden state at each of those
                        positions (row i predicted tokens[i]), for feature drafters
"""

from __future__ import annotations

import json
import random
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from specscribe.models.distill.data import Item, read_manifest, read_wav

LABELS = "labels.jsonl"
NEG_FILL = -1.0e4  # stands in for -inf in the stored top-k logits (fp16-safe)


@dataclass(frozen=True)
class LabelOptions:
    """How to pseudo-label.

    Attributes:
        top_k: target logits kept per position.
        limit: label at most this many windows (0: all).
        compute_type: the target's compute type ("auto": bf16 on AMX CPUs).
        timestamp_fraction: share of decodes with timestamps (the rest use <|notimestamps|>).
        previous_fraction: share of decodes given the previous window's text as a prompt.
        translate: also decode non-English windows with the translate task.
        seed: seed of the per-decode choices.
        threads: torch threads for the target (1 avoids OpenMP spin-waits on a shared machine).
        shard: (i, n): label only windows whose index % n == i, into labels-i-of-n.jsonl, so n
            processes can label one dataset side by side.
        max_compression_ratio, min_avg_logprob, max_no_speech_prob: hallucination filters.
        min_chars_per_second, max_chars_per_second: text length against the audio's duration.
    """

    top_k: int = 32
    limit: int = 0
    compute_type: str = "auto"
    timestamp_fraction: float = 0.5
    previous_fraction: float = 0.2
    translate: bool = True
    seed: int = 0
    threads: int = 1
    shard: tuple[int, int] = (0, 1)
    max_compression_ratio: float = 2.4
    min_avg_logprob: float = -1.0
    max_no_speech_prob: float = 0.6
    min_chars_per_second: float = 2.0
    max_chars_per_second: float = 35.0


@dataclass(frozen=True)
class PseudoLabel:
    """One greedy decode by the target, with its top-k distributions.

    Attributes:
        prompt: the decoder prompt (start sequence, maybe previous text and <|notimestamps|>).
        tokens: generated ids without end-of-text.
        text: decoded text.
        avg_logprob, no_speech_prob: faster-whisper's confidence figures.
        finished: end-of-text was produced (not cut by the length limit).
        topk_values: (len(tokens)+1, k) filtered target logits, best first, -inf as NEG_FILL.
        topk_indices: (len(tokens)+1, k) their token ids; row i predicts tokens[i] (last: eot).
        features: (len(tokens)+1, d) the target's final-LN hidden states of those rows, or None.
    """

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    text: str
    avg_logprob: float
    no_speech_prob: float
    finished: bool
    topk_values: np.ndarray
    topk_indices: np.ndarray
    features: np.ndarray | None = None


class Teacher(Protocol):
    """The target model as the labeller sees it."""

    eot: int
    timestamp_begin: int

    def encode(self, audio: np.ndarray) -> tuple[Any, np.ndarray]:
        """audio 16 kHz -> (engine handle, encoder output (S, d) float16)."""
        ...

    def label(
        self, handle: Any, language: str, task: str, timestamps: bool, previous: Sequence[int], top_k: int
    ) -> PseudoLabel: ...


class EngineTeacher:
    """A Teacher over the spec engine (models/spec_engine.py), target-only greedy decoding."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.eot = engine.tokenizer.eot
        self.timestamp_begin = engine.tokenizer.timestamp_begin

    def encode(self, audio: np.ndarray) -> tuple[Any, np.ndarray]:
        import torch

        encoded = self.engine.encode(audio)
        return encoded, encoded.handle[0].to(dtype=torch.float16).cpu().numpy()

    def label(self, handle, language, task, timestamps, previous, top_k) -> PseudoLabel:
        from specscribe.models.types import DecodeRequest

        request = DecodeRequest(task=task, language=language, timestamps=timestamps, prompt_tokens=tuple(previous))
        result = self.engine.decode(handle, request)
        prompt = self.engine.prompt(request, language)
        rules = self.engine.rules(request)
        tokens = list(result.tokens)
        values, indices, features = teacher_forced(self.engine.session(handle), prompt, tokens, rules, top_k)
        return PseudoLabel(
            prompt=tuple(prompt),
            tokens=tuple(tokens),
            text=result.text,
            avg_logprob=result.avg_logprob,
            no_speech_prob=result.no_speech_prob,
            finished=result.stats.tokens > len(tokens),  # end-of-text counted
            topk_values=values.numpy().astype(np.float16),
            topk_indices=indices.numpy().astype(np.int32),
            features=features.numpy(),
        )


def teacher_forced(session, prompt: Sequence[int], tokens: Sequence[int], rules, top_k: int):
    """One teacher-forced target pass over prompt + tokens on a fresh DecoderSession: at each of the
    n+1 label positions (row i predicts tokens[i], the last end-of-text) the target's top-k logits
    after its logit rules, and its final-LN hidden state.

    Returns values (n+1, k) float32 (-inf as NEG_FILL), indices (n+1, k) long, states (n+1, d) float16.
    """
    import torch

    prompt, tokens = list(prompt), list(tokens)
    logits = session.forward(prompt + tokens)[len(prompt) - 1 :]  # (n+1, V)
    states = session.hidden[len(prompt) - 1 :]  # (n+1, d)
    rows = [rules.apply(logits[i], tokens[:i]) for i in range(len(tokens) + 1)]
    filtered = torch.stack(rows).float().clamp_min(NEG_FILL)  # (n+1, V)
    values, indices = filtered.topk(top_k, dim=-1)  # (n+1, k)
    return values, indices, states.to(torch.float16).cpu()


def load_teacher(model: str, options: LabelOptions) -> EngineTeacher:
    from specscribe.models.engines import EngineOptions
    from specscribe.models.registry import resolve_model
    from specscribe.models.spec_engine import SpecEngine

    folder = resolve_model(model)
    return EngineTeacher(SpecEngine(folder, EngineOptions(
        model=model, compute_type=options.compute_type, draft="none", threads=options.threads
    )))


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def reject_reason(label: PseudoLabel, duration: float, options: LabelOptions) -> str | None:
    """Why a pseudo-label is filtered out (hallucinated, empty, cut off), or None to keep it."""
    text = label.text.strip()
    if not text:
        return "empty"
    if not label.finished:
        return "no end-of-text"
    if compression_ratio(text) > options.max_compression_ratio:
        return "compression ratio"
    if label.avg_logprob < options.min_avg_logprob:
        return "avg_logprob"
    if label.no_speech_prob > options.max_no_speech_prob:
        return "no speech"
    cps = len(text) / max(duration, 0.1)
    if cps > options.max_chars_per_second or (duration > 3.0 and cps < options.min_chars_per_second):
        return "text length vs duration"
    return None


def _jobs(item: Item, rng: random.Random, options: LabelOptions) -> list[tuple[str, bool]]:
    """(task, timestamps) decodes for one window."""
    tasks = ["transcribe"] + (["translate"] if options.translate and item.lang != "en" else [])
    return [(task, rng.random() < options.timestamp_fraction) for task in tasks]


def _label_files(out: Path) -> list[Path]:
    return sorted(out.glob("labels*.jsonl"))


def _rows(out: Path) -> list[dict[str, Any]]:
    rows = []
    for path in _label_files(out):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def label_dataset(
    folder: Path, teacher: Teacher, options: LabelOptions, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Label every window of folder's manifest (resuming after the last labelled one)."""
    folder = Path(folder)
    out = folder / "labels"
    (out / "enc").mkdir(parents=True, exist_ok=True)
    (out / "topk").mkdir(exist_ok=True)
    (out / "feat").mkdir(exist_ok=True)
    items = read_manifest(folder)
    if options.limit:
        items = items[: options.limit]
    shard, shards = options.shard
    items = [item for n, item in enumerate(items) if n % shards == shard]
    done = {row["item"] for row in _rows(out)}
    name = LABELS if shards == 1 else f"labels-{shard}-of-{shards}.jsonl"
    previous: dict[str, list[int]] = {}  # language -> text tokens of the last kept transcript
    counts: dict[str, int] = {"items": 0, "decodes": 0, "kept": 0}
    started = time.monotonic()
    with open(out / name, "a") as fh:
        for n, item in enumerate(items):
            rng = random.Random(f"{options.seed}:{item.id}")
            if item.id in done:
                continue
            handle, enc = teacher.encode(read_wav(folder / item.audio))
            np.save(out / "enc" / f"{item.id}.npy", enc.astype(np.float16))
            for j, (task, timestamps) in enumerate(_jobs(item, rng, options)):
                prev = previous.get(item.lang, []) if rng.random() < options.previous_fraction else []
                label = teacher.label(handle, item.lang, task, timestamps, prev, options.top_k)
                reason = reject_reason(label, item.duration, options)
                seq = f"{item.id}-{j}"
                if reason is None:
                    np.savez(out / "topk" / f"{seq}.npz", values=label.topk_values, indices=label.topk_indices)
                    if label.features is not None:
                        np.save(out / "feat" / f"{seq}.npy", label.features)
                    if task == "transcribe":
                        previous[item.lang] = [t for t in label.tokens if t < teacher.eot]
                row = {
                    "seq": seq, "item": item.id, "split": item.split, "lang": item.lang, "task": task,
                    "timestamps": timestamps, "prompt": list(label.prompt), "tokens": list(label.tokens),
                    "text": label.text, "avg_logprob": round(label.avg_logprob, 4),
                    "no_speech_prob": round(label.no_speech_prob, 4),
                    "compression_ratio": round(compression_ratio(label.text), 3),
                    "kept": reason is None, "reason": reason,
                }  # fmt: skip
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                counts["decodes"] += 1
                counts["kept"] += reason is None
            counts["items"] += 1
            if counts["items"] % 10 == 0:
                rate = counts["items"] / (time.monotonic() - started)
                log(f"label: {n + 1}/{len(items)} windows, {counts['kept']}/{counts['decodes']} kept, {rate:.2f} win/s")
    counts["seconds"] = round(time.monotonic() - started, 1)
    return counts


@dataclass(frozen=True)
class LabelledSequence:
    """A kept pseudo-label, ready for training.

    Attributes:
        seq: its id (also its top-k file's stem).
        item: the window (its encoder output's stem).
        split: "train" or "val".
        lang, task, timestamps: how it was decoded.
        prompt: decoder prompt ids.
        tokens: generated ids (without end-of-text).
    """

    seq: str
    item: str
    split: str
    lang: str
    task: str
    timestamps: bool
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]


def read_labels(folder: Path, kept_only: bool = True) -> list[LabelledSequence]:
    """Every labelled sequence (all shards' files), in item order."""
    out_dir = Path(folder) / "labels"
    if not _label_files(out_dir):
        raise FileNotFoundError(f"{out_dir / LABELS} does not exist: run the label stage first")
    out = []
    for row in sorted(_rows(out_dir), key=lambda r: r["seq"]):
        if kept_only and not row["kept"]:
            continue
        fields = {k: row[k] for k in ("seq", "item", "split", "lang", "task", "timestamps")}
        out.append(LabelledSequence(**fields, prompt=tuple(row["prompt"]), tokens=tuple(row["tokens"])))
    return out


def summary(folder: Path) -> dict[str, Any]:
    """Counts of kept and filtered decodes, by reason and by task."""
    rows = _rows(Path(folder) / "labels")
    reasons: dict[str, int] = {}
    for row in rows:
        reasons[row["reason"] or "kept"] = reasons.get(row["reason"] or "kept", 0) + 1
    return {"decodes": len(rows), "by_reason": reasons, "options": asdict(LabelOptions())}
