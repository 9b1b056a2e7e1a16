"""Build the synthetic training set: 16 kHz WAVs plus ``manifest.jsonl``, reproducible from a seed.

Each item is one window of 2-29.5 s: a single synthesized text, or (``long_fraction`` of them)
several texts of one language joined with short pauses, so that timestamps up to 30 s occur.
English mixes piper, festival and espeak-ng; de, fr, es and it come from espeak-ng and feed
both the transcribe and the translate task at labelling time.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from specscribe.models.distill.synth import SAMPLE_RATE, Synthesizer, SynthError, augment, channel_effects
from specscribe.models.distill.text import TextItem

MANIFEST = "manifest.jsonl"


@dataclass(frozen=True)
class DataOptions:
    """What to synthesize.

    Attributes:
        hours: total audio to make, in hours.
        seed: seed of every random choice (texts, voices, speeds, pauses, splits).
        languages: {language: share of the windows}.
        backends: {backend: share} for English (other languages use espeak).
        min_seconds, max_seconds: bounds of one window.
        long_fraction: share of windows built by joining texts to 18-29.5 s.
        val_fraction: share of windows put in the validation split.
        prose_fraction: share of texts taken from fortunes rather than licences (en) or gettext
            messages (other languages; French has only those).
        effects: speed, room reverb and telephone-band coding on some texts (synth.channel_effects),
            named in the item's voice; False makes the datasets of before (the shipped draft's).
    """

    hours: float = 1.0
    seed: int = 0
    languages: Mapping[str, float] = field(
        default_factory=lambda: {"en": 0.6, "de": 0.1, "fr": 0.1, "es": 0.1, "it": 0.1}
    )
    backends: Mapping[str, float] = field(default_factory=lambda: {"piper": 0.4, "festival": 0.25, "espeak": 0.35})
    min_seconds: float = 2.0
    max_seconds: float = 29.5
    long_fraction: float = 0.25
    val_fraction: float = 0.05
    prose_fraction: float = 0.7
    effects: bool = True


@dataclass(frozen=True)
class Item:
    """One window of the training set (a line of manifest.jsonl).

    Attributes:
        id: stable name, also the WAV's stem.
        audio: WAV path relative to the dataset folder.
        lang: language spoken.
        text: what was synthesized (not a label: labels come from the target).
        voice: backend and settings of each part, joined with " + ".
        sources: where each text came from.
        duration: seconds.
        split: "train" or "val".
    """

    id: str
    audio: str
    lang: str
    text: str
    voice: str
    sources: tuple[str, ...]
    duration: float
    split: str


def write_wav(path: Path, audio: np.ndarray, rate: int = SAMPLE_RATE) -> None:
    pcm = (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as wf:
        wf.setnchannels(1)
        wf.setsampwidth(2)
        wf.setframerate(rate)
        wf.writeframes(pcm.tobytes())


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as wf:
        if wf.getframerate() != SAMPLE_RATE or wf.getnchannels() != 1:
            raise ValueError(f"{path}: expected 16 kHz mono")
        return np.frombuffer(wf.readframes(wf.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def read_manifest(folder: Path) -> list[Item]:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the data stage first")
    items = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        row["sources"] = tuple(row["sources"])
        items.append(Item(**row))
    return items


def _weighted(rng: random.Random, weights: Mapping[str, float]) -> str:
    names = sorted(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


class _TextPicker:
    """Draws texts per language without replacement (cycling when a pool runs out)."""

    def __init__(self, corpus: Mapping[str, Sequence[TextItem]], rng: random.Random, prose_fraction: float):
        self.rng, self.prose_fraction = rng, prose_fraction
        self.pools: dict[tuple[str, bool], list[TextItem]] = {}
        for lang, items in corpus.items():
            for prose in (True, False):
                pool = [it for it in items if it.source.startswith("fortunes:") == prose]
                rng.shuffle(pool)
                self.pools[(lang, prose)] = pool
        self.pos = {key: 0 for key in self.pools}

    def pick(self, lang: str) -> TextItem:
        prose = self.rng.random() < self.prose_fraction
        key = (lang, prose) if self.pools.get((lang, prose)) else (lang, not prose)
        pool = self.pools.get(key)
        if not pool:
            raise ValueError(f"no text for language {lang!r}")
        item = pool[self.pos[key] % len(pool)]
        self.pos[key] += 1
        return item


def build_dataset(
    out: Path,
    corpus: Mapping[str, Sequence[TextItem]],
    backends: Mapping[str, Synthesizer],
    options: DataOptions,
    log: Callable[[str], None] = print,
) -> list[Item]:
    """Synthesize windows into out/audio until options.hours of audio exist; write the manifest."""
    out = Path(out)
    if (out / MANIFEST).exists():
        raise FileExistsError(f"{out / MANIFEST} exists: choose an empty folder")
    (out / "audio").mkdir(parents=True, exist_ok=True)
    rng = random.Random(options.seed)
    picker = _TextPicker(corpus, rng, options.prose_fraction)
    langs = {k: v for k, v in options.languages.items() if corpus.get(k) and v > 0}
    if "espeak" not in backends:
        langs = {k: v for k, v in langs.items() if k == "en"}
    en_backends = {k: v for k, v in options.backends.items() if k in backends and v > 0}
    if not langs or not en_backends:
        raise RuntimeError("no usable language/backend: install espeak-ng (and festival, piper-tts)")
    items: list[Item] = []
    total, goal, started, failures = 0.0, options.hours * 3600.0, time.monotonic(), 0
    with open(out / MANIFEST, "w") as manifest:
        while total < goal:
            lang = _weighted(rng, langs)
            backend = backends[_weighted(rng, en_backends) if lang == "en" else "espeak"]
            long = rng.random() < options.long_fraction
            want = rng.uniform(18.0, options.max_seconds) if long else options.min_seconds
            parts: list[np.ndarray] = []
            texts: list[TextItem] = []
            voices: list[str] = []
            length = 0.0
            while length < want and failures < 1000:
                text = picker.pick(lang)
                try:
                    speech = backend.synthesize(text.text, lang, rng)
                except (SynthError, OSError, ValueError) as exc:
                    failures += 1
                    log(f"skip {text.source}: {exc}")
                    continue
                clean, voice = speech.audio, speech.voice
                if options.effects:  # its own random stream: without effects the data is as before
                    clean, applied = channel_effects(clean, random.Random(rng.getrandbits(32)))
                    voice = "+".join((voice, *applied))
                audio = augment(clean, rng)
                if length + audio.size / SAMPLE_RATE > options.max_seconds:
                    if parts:
                        break
                    continue  # this text alone is too long
                parts.append(audio)
                texts.append(text)
                voices.append(voice)
                length += audio.size / SAMPLE_RATE
            if not parts:
                raise RuntimeError("synthesis keeps failing; see the messages above")
            audio = np.concatenate(parts)
            digest = hashlib.sha1(f"{options.seed}:{len(items)}:{texts[0].text}".encode()).hexdigest()[:10]
            item_id = f"{len(items):06d}-{lang}-{digest}"
            write_wav(out / "audio" / f"{item_id}.wav", audio)
            item = Item(
                id=item_id,
                audio=f"audio/{item_id}.wav",
                lang=lang,
                text=" ".join(t.text for t in texts),
                voice=" + ".join(voices),
                sources=tuple(t.source for t in texts),
                duration=round(audio.size / SAMPLE_RATE, 3),
                split="val" if rng.random() < options.val_fraction else "train",
            )
            manifest.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
            manifest.flush()  # the label stage may read a growing manifest
            items.append(item)
            total += item.duration
            if len(items) % 50 == 0:
                log(f"data: {len(items)} windows, {total / 3600:.3f} h, {time.monotonic() - started:.0f} s")
    recipe = {"options": asdict(options), "windows": len(items), "hours": round(total / 3600, 4)}
    recipe["by_language"] = {k: sum(1 for i in items if i.lang == k) for k in sorted(langs)}
    (out / "recipe.json").write_text(json.dumps(recipe, indent=1, default=dict))
    log(f"data: done, {len(items)} windows, {total / 3600:.3f} h in {out}")
    return items
