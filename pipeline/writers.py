"""Transcript writers: txt, srt, vtt, json, tsv. Every file is written atomically.

Subtitle cues are wrapped to ``max_line_width`` characters and ``max_line_count`` lines. When a
segment does not fit in one cue and its words are known, it is split into several cues at word
boundaries, each cue timed by its own words; without words, the text is wrapped and the overflow
lines go into further cues that share the segment's time in proportion to their length.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from specscribe.models.types import Alternative, Segment, Word
from specscribe.pipeline.longform import Transcript

FORMATS = ("txt", "srt", "vtt", "json", "tsv")


@dataclass(frozen=True)
class WriterOptions:
    """Output settings.

    Attributes:
        max_line_width: characters per subtitle line (srt/vtt).
        max_line_count: lines per subtitle cue; 0 means no limit (one cue per segment).
        word_timestamps: include words in json.
        window_stats: include the per-window breakdown in json.
    """

    max_line_width: int = 42
    max_line_count: int = 2
    word_timestamps: bool = False
    window_stats: bool = False


@dataclass(frozen=True)
class Cue:
    """One subtitle cue. Attributes: start, end (seconds), lines (already wrapped)."""

    start: float
    end: float
    lines: tuple[str, ...]


# --- atomic files -------------------------------------------------------------------------
TEMP_SUFFIX = ".tmp"  # temp files are ".<name>.<random>.tmp" next to <name>: hidden, never an output name


def write_atomic(path: Path, text: str) -> None:
    """Write text to path via a temp file in the same folder, fsync, os.replace, fsync of the folder:
    all or nothing, even on kill -9 or power loss (a killed write leaves only a hidden temp file,
    which the next write of the same path removes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def stale_temps(path: Path) -> list[Path]:
    """Temp files that an interrupted write_atomic(path, ...) left behind."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    return sorted(path.parent.glob(f".{glob.escape(path.name)}.*{TEMP_SUFFIX}"))


# --- time formats ---------------------------------------------------------------------------
def format_timestamp(seconds: float, decimal: str = ".", always_hours: bool = True) -> str:
    """12.345 -> '00:00:12.345' (vtt) or, with decimal=',', '00:00:12,345' (srt)."""
    ms = max(0, int(round(seconds * 1000)))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    head = f"{hours:02d}:" if always_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


# --- cues -----------------------------------------------------------------------------------
def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text.strip(), width=width, break_long_words=False, break_on_hyphens=False) or [""]


_BREAK_AFTER = (".", ",", "!", "?", ";", ":", "…", "。", "，", "！", "？")


def _cue(words: Sequence[Word], width: int) -> Cue:
    return Cue(words[0].start, words[-1].end, tuple(_wrap("".join(w.text for w in words), width)))


def _cues_from_words(words: Sequence[Word], width: int, count: int) -> list[Cue]:
    """Fill cues word by word; on overflow, break after the last punctuation in the second
    half of the cue if there is one (a clause per cue reads better), else before the word."""
    cues: list[Cue] = []
    group: list[Word] = []
    for word in words:
        trial = "".join(w.text for w in group + [word])
        if group and len(_wrap(trial, width)) > count:
            cut = len(group)
            for j in range(len(group) - 1, len(group) // 2 - 1, -1):
                if group[j].text.strip().endswith(_BREAK_AFTER):
                    cut = j + 1
                    break
            cues.append(_cue(group[:cut], width))
            group = group[cut:]
        group.append(word)
    if group:
        cues.append(_cue(group, width))
    return cues


def segment_cues(segment: Segment, width: int, count: int) -> list[Cue]:
    """A segment as one or more cues of at most `count` lines of about `width` characters."""
    lines = _wrap(segment.text, width)
    if not count or len(lines) <= count:
        return [Cue(segment.start, segment.end, tuple(lines))]
    if segment.words:
        return _cues_from_words(segment.words, width, count)
    groups = [lines[i : i + count] for i in range(0, len(lines), count)]
    total = sum(len(" ".join(g)) for g in groups)
    cues, t = [], segment.start
    for g in groups:
        dt = (segment.end - segment.start) * len(" ".join(g)) / total
        cues.append(Cue(t, t + dt, tuple(g)))
        t += dt
    return cues


def make_cues(segments: Iterable[Segment], width: int, count: int) -> list[Cue]:
    cues = [c for seg in segments if seg.text.strip() for c in segment_cues(seg, width, count)]
    out: list[Cue] = []
    for cue in cues:  # players dislike overlaps and zero-length cues
        start = max(cue.start, out[-1].end if out else 0.0)
        end = max(cue.end, start + 0.001)
        out.append(Cue(start, end, cue.lines))
    return out


# --- formats --------------------------------------------------------------------------------
def to_txt(segments: Sequence[Segment]) -> str:
    lines = [s.text.strip() for s in segments if s.text.strip()]
    return "\n".join(lines) + ("\n" if lines else "")


def to_srt(segments: Sequence[Segment], options: WriterOptions = WriterOptions()) -> str:
    blocks = []
    for i, cue in enumerate(make_cues(segments, options.max_line_width, options.max_line_count), 1):
        times = f"{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}"
        blocks.append(f"{i}\n{times}\n" + "\n".join(cue.lines) + "\n")
    return "\n".join(blocks)


def to_vtt(segments: Sequence[Segment], options: WriterOptions = WriterOptions()) -> str:
    blocks = ["WEBVTT\n"]
    for cue in make_cues(segments, options.max_line_width, options.max_line_count):
        times = f"{format_timestamp(cue.start)} --> {format_timestamp(cue.end)}"
        blocks.append(f"{times}\n" + "\n".join(cue.lines) + "\n")
    return "\n".join(blocks)


def to_tsv(segments: Sequence[Segment]) -> str:
    """start and end in integer milliseconds, as openai/whisper's tsv writer."""
    rows = ["start\tend\ttext"]
    for s in segments:
        text = s.text.strip().replace("\t", " ").replace("\n", " ")
        if text:
            rows.append(f"{int(round(s.start * 1000))}\t{int(round(s.end * 1000))}\t{text}")
    return "\n".join(rows) + "\n"


def _segment_dict(seg: Segment, words: bool) -> dict:
    out = {"start": round(seg.start, 3), "end": round(seg.end, 3), "text": seg.text.strip()}
    if seg.language is not None:
        out["language"] = seg.language
    if words:
        out["words"] = [
            {"start": round(w.start, 3), "end": round(w.end, 3), "text": w.text.strip(), "probability": round(w.probability, 4)}
            for w in seg.words
        ]
    if seg.alternatives:
        out["alternatives"] = alternatives_json(seg.alternatives)
    return out


def alternatives_json(alternatives: Sequence[Alternative]) -> list[dict]:
    """A segment's n-best as JSON: [{text, tokens, avg_logprob}], best first."""
    return [{"text": a.text.strip(), "tokens": list(a.tokens), "avg_logprob": round(a.avg_logprob, 4)} for a in alternatives]


def to_json(transcript: Transcript, options: WriterOptions = WriterOptions()) -> str:
    doc = {
        "text": transcript.text,
        "language": transcript.language,
        "language_probability": round(transcript.language_probability, 4),
        "duration": round(transcript.duration, 3),
        "task": transcript.task,
        "segments": [_segment_dict(s, options.word_timestamps) for s in transcript.segments],
    }
    if transcript.translation is not None:
        doc["translation"] = {
            "text": "".join(s.text for s in transcript.translation).strip(),
            "segments": [_segment_dict(s, False) for s in transcript.translation],
        }
    doc["stats"] = transcript.stats.to_dict()
    t = transcript.timing
    doc["timing"] = {k: round(v, 3) for k, v in vars(t).items()}
    if options.window_stats:
        doc["windows"] = [w.to_dict() for w in transcript.windows]
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def render(fmt: str, transcript: Transcript, segments: Sequence[Segment], options: WriterOptions) -> str:
    """The text of one output file. json always describes the whole transcript."""
    renderers: dict[str, Callable[[], str]] = {
        "txt": lambda: to_txt(segments),
        "srt": lambda: to_srt(segments, options),
        "vtt": lambda: to_vtt(segments, options),
        "tsv": lambda: to_tsv(segments),
        "json": lambda: to_json(transcript, options),
    }
    if fmt not in renderers:
        raise ValueError(f"unknown output format {fmt!r}; choose from {', '.join(FORMATS)} or all")
    return renderers[fmt]()


def output_paths(stem: Path, formats: Sequence[str], translation: bool) -> list[Path]:
    """Every file write_outputs makes for stem (for --skip-existing: each is complete once it exists,
    since it only ever appears by os.replace of a finished, fsynced temp file)."""
    paths = [stem.with_name(f"{stem.name}.{fmt}") for fmt in formats]
    if translation:
        paths += [stem.with_name(f"{stem.name}.translation.{fmt}") for fmt in formats if fmt != "json"]
    return paths


def write_outputs(transcript: Transcript, stem: Path, formats: Sequence[str], options: WriterOptions) -> list[Path]:
    """Write <stem>.<fmt> for each format (and <stem>.translation.<fmt> with task both).

    Everything is rendered first, then written file by file atomically; if a write fails
    (disk full, permissions), the files already written for this transcript are removed again.
    """
    texts: list[tuple[Path, str]] = []
    for fmt in formats:
        texts.append((stem.with_name(f"{stem.name}.{fmt}"), render(fmt, transcript, transcript.segments, options)))
    if transcript.translation is not None:
        for fmt in formats:
            if fmt != "json":
                path = stem.with_name(f"{stem.name}.translation.{fmt}")
                texts.append((path, render(fmt, transcript, transcript.translation, options)))
    for path, _ in texts:  # left by a run killed while writing this input
        for tmp in stale_temps(path):
            tmp.unlink(missing_ok=True)
    written: list[Path] = []
    try:
        for path, text in texts:
            write_atomic(path, text)
            written.append(path)
    except BaseException:
        for path in written:  # all of this input's files or none
            path.unlink(missing_ok=True)
        raise
    return written


def parse_formats(value: str) -> tuple[str, ...]:
    """'srt,vtt' -> ('srt', 'vtt'); 'all' -> every format. Raises ValueError for unknown names."""
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    if not names:
        raise ValueError("no output format given")
    if "all" in names:
        return FORMATS
    bad = [n for n in names if n not in FORMATS]
    if bad:
        raise ValueError(f"unknown output format {bad[0]!r}; choose from {', '.join(FORMATS)} or all")
    return tuple(dict.fromkeys(names))
