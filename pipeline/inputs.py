"""Inputs of a batch: files, folders and stdin as items, their probed durations and their audio."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from specscribe.pipeline.audio import load_audio

MEDIA_EXTENSIONS = frozenset(
    "wav flac mp3 m4a aac ogg oga opus wma aif aiff alac amr au caf mka webm "
    "mp4 m4v mkv mov avi mpg mpeg ts mts 3gp flv wmv".split()
)


@dataclass(frozen=True)
class InputItem:
    """One thing to transcribe.

    Attributes:
        display: the name used in messages (path as found, or "-").
        path: the file, or None for stdin.
        stem: output path without extension, relative to the output folder.
        data: the bytes read from stdin.
    """

    display: str
    path: Path | None
    stem: Path
    data: bytes | None = None


def collect_inputs(args: Sequence[str], stdin: bytes | None = None) -> tuple[list[InputItem], list[str]]:
    """Expand files and directories (walked recursively for media extensions) into items.

    Returns (items, errors): errors are one-line messages for inputs that do not exist or
    directories without media files. Explicit files are tried whatever their extension.
    """
    items: list[InputItem] = []
    errors: list[str] = []
    for arg in args:
        if arg == "-":
            items.append(InputItem("-", None, Path("stdin"), stdin if stdin is not None else b""))
            continue
        path = Path(arg)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*")
                if p.is_file() and p.suffix.lower().lstrip(".") in MEDIA_EXTENSIONS
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                errors.append(f"{arg}: no audio or video files in this directory")
            items += [InputItem(str(p), p, p.relative_to(path).with_suffix("")) for p in found]
        elif path.exists():
            items.append(InputItem(arg, path, Path(path.stem)))
        else:
            errors.append(f"{arg}: no such file or directory")
    return _dedupe_stems(items), errors


def _dedupe_stems(items: list[InputItem]) -> list[InputItem]:
    """Output stems made unique, the same way every run (so --skip-existing finds them again).

    An input whose stem no other input has keeps it. Inputs sharing a stem keep their extension
    (x.wav, x.mp3); where that still clashes, their parent folders go in front, one at a time
    (a/x.wav, b/x.wav), and as a last resort a number goes after (the same file twice: x.wav, x.wav-2).
    """
    counts = Counter(item.stem for item in items)
    taken = {stem for stem, n in counts.items() if n == 1}
    stems = [item.stem for item in items]
    left = [i for i, item in enumerate(items) if counts[item.stem] > 1]
    level = 0
    while left:
        names = {i: _longer_stem(items[i], level) for i in left}
        if all(name is None for name in names.values()):
            break
        clashes = Counter(names.values())
        for i in list(left):
            if names[i] is not None and clashes[names[i]] == 1 and names[i] not in taken:
                stems[i] = names[i]
                taken.add(names[i])
                left.remove(i)
        level += 1
    for i in left:  # no folder left to tell them apart
        base = _longer_stem(items[i], 0) or items[i].stem
        name, n = base, 1
        while name in taken:
            n += 1
            name = base.with_name(f"{base.name}-{n}")
        stems[i] = name
        taken.add(name)
    return [item if stem == item.stem else replace(item, stem=stem) for item, stem in zip(items, stems)]


def _longer_stem(item: InputItem, folders: int) -> Path | None:
    """The stem with the file's extension and `folders` more of its parent folders in front
    (None: stdin, or not that many folders)."""
    if item.path is None:
        return None
    stem = item.stem.with_name(item.path.name)
    parents = Path(os.path.abspath(item.path)).parent.parts[1:]  # without the root (/ or a drive)
    end = len(parents) - (len(stem.parts) - 1)  # the folders already in the stem (a walked folder's)
    if folders > end:
        return None
    return Path(*parents[end - folders : end], *stem.parts)


def probe_duration(item: InputItem) -> float:
    """Container duration in seconds without decoding (0.0 when unknown or unreadable)."""
    if item.path is None:
        return len(item.data or b"") / 32000  # a rough guess for the progress bar only
    try:
        import av

        with av.open(str(item.path), metadata_errors="ignore") as container:
            return (container.duration or 0) / 1_000_000
    except Exception:  # a bad file is reported when it is really read
        return 0.0


AudioLoader = Callable[[InputItem], np.ndarray]  # item -> (n,) float32 16 kHz


def read_item(item: InputItem) -> np.ndarray:
    """An item's audio, decoded and resampled (raises AudioError for a bad file)."""
    return load_audio(item.data if item.path is None else item.path)


def seconds_after(durations: Sequence[float]) -> list[float]:
    """[sum(durations[n + 1:]) for each n]: the audio still to come after each item."""
    out, total = [], 0.0
    for d in reversed(durations):
        out.append(total)
        total += d
    return out[::-1]
