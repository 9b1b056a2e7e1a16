"""Transcript writers: txt, srt, vtt, json, tsv. Every file is written atomically, with the mode
open() gives a new file.

Subtitle cues (wrapped to ``max_line_width`` characters and ``max_line_count`` lines) come from
pipeline/cues.py. Cue text is escaped as the format needs: ``-->`` (a timing line's arrow) becomes
``->`` in srt and vtt, and vtt writes ``&``, ``<`` and ``>`` as character references. txt, json and
tsv keep the text as it is.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from specscribe.models.types import Alternative, Segment
from specscribe.pipeline.cues import Cue, make_cues, segment_cues  # noqa: F401  (Cue, segment_cues: re-exported)
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


# --- atomic files -------------------------------------------------------------------------
TEMP_SUFFIX = ".tmp"  # temp files are ".<name>.<random>.tmp" next to <name>: hidden, never an output name


def write_atomic(path: Path, text: str) -> None:
    """Write text to path via a temp file in the same folder, fsync, os.replace, fsync of the folder:
    all or nothing, even on kill -9 or power loss (a killed write leaves only a hidden temp file,
    which the next write of the same path removes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path)
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


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new ".<name>.<random>.tmp" next to path, opened exclusively with mode 0666 for the umask to
    cut, as open() makes a new file (mkstemp's 0600 would stay on the output through os.replace)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(path))


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


# --- formats --------------------------------------------------------------------------------
def _no_arrow(line: str) -> str:
    """A cue line with "-->" would read as a timing line (srt, vtt); "--->" needs two passes."""
    while "-->" in line:
        line = line.replace("-->", "->")
    return line


def _vtt_escape(line: str) -> str:
    """WebVTT cue text may not hold a raw & or < (nor, by the spec's advice, >)."""
    return _no_arrow(line).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_txt(segments: Sequence[Segment]) -> str:
    lines = [s.text.strip() for s in segments if s.text.strip()]
    return "\n".join(lines) + ("\n" if lines else "")


def to_srt(segments: Sequence[Segment], options: WriterOptions = WriterOptions()) -> str:
    blocks = []
    for i, cue in enumerate(make_cues(segments, options.max_line_width, options.max_line_count), 1):
        times = f"{format_timestamp(cue.start, ',')} --> {format_timestamp(cue.end, ',')}"
        blocks.append(f"{i}\n{times}\n" + "\n".join(map(_no_arrow, cue.lines)) + "\n")
    return "\n".join(blocks)


def to_vtt(segments: Sequence[Segment], options: WriterOptions = WriterOptions()) -> str:
    blocks = ["WEBVTT\n"]
    for cue in make_cues(segments, options.max_line_width, options.max_line_count):
        times = f"{format_timestamp(cue.start)} --> {format_timestamp(cue.end)}"
        blocks.append(f"{times}\n" + "\n".join(map(_vtt_escape, cue.lines)) + "\n")
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
