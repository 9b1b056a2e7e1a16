"""Batch transcription: inputs -> one loaded model -> transcripts -> output files.

A bad file costs exactly one line on stderr (``specscribe: error: FILE: REASON``), leaves no
output behind, and the batch goes on; the caller exits non-zero at the end. A model that cannot
load stops the batch (ModelError, one line from the CLI). With ``workers > 1`` the file list is
split over that many processes, each loading its own model with cores // workers threads.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queue_mod
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence, TextIO

from specscribe.models.engines import EngineOptions, Transcriber
from specscribe.models.errors import ModelError
from specscribe.pipeline.audio import SAMPLE_RATE, AudioError, load_audio
from specscribe.pipeline.longform import LongformOptions, Transcript, transcribe_audio
from specscribe.pipeline.progress import BatchProgress
from specscribe.pipeline.writers import WriterOptions, output_paths, write_outputs

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class BatchOptions:
    """Everything a batch run needs.

    Attributes:
        engine: how to load the model.
        longform: decoding options per file.
        writer: output formatting.
        formats: output formats.
        output_dir: where outputs go (sub-folders mirror input directories).
        skip_existing: skip inputs whose outputs all exist.
        workers: processes, each with its own model.
        quiet: no progress bars, no summary.
    """

    engine: EngineOptions = field(default_factory=EngineOptions)
    longform: LongformOptions = field(default_factory=LongformOptions)
    writer: WriterOptions = field(default_factory=WriterOptions)
    formats: tuple[str, ...] = ("txt",)
    output_dir: Path = Path(".")
    skip_existing: bool = False
    workers: int = 1
    quiet: bool = False


@dataclass(frozen=True)
class BatchReport:
    """How a batch went. Attributes: done, failed, skipped (counts), audio_seconds, wall_seconds."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0


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
    """Two inputs with the same stem (a.wav, a.mp3) keep their extension in the output name."""
    counts: dict[Path, int] = {}
    for item in items:
        counts[item.stem] = counts.get(item.stem, 0) + 1
    out = []
    for item in items:
        if counts[item.stem] > 1 and item.path is not None:
            item = replace(item, stem=item.stem.with_name(item.path.name))
        out.append(item)
    return out


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


def transcribe_item(
    transcriber: Transcriber, item: InputItem, options: BatchOptions, progress: BatchProgress | None = None
) -> Transcript:
    """Load, transcribe and write one input. Raises AudioError (or anything) before writing a byte."""
    audio = load_audio(item.data if item.path is None else item.path)
    duration = len(audio) / SAMPLE_RATE
    if progress is not None:
        progress.start_file(item.display, duration)
    transcript = transcribe_audio(
        transcriber, audio, options.longform, path=item.display,
        on_progress=progress.advance_file if progress is not None else None,
    )
    write_outputs(transcript, options.output_dir / item.stem, options.formats, options.writer)
    return transcript


def _reason(exc: BaseException) -> str:
    """The one-line reason shown for a failed file."""
    if isinstance(exc, AudioError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _should_skip(item: InputItem, options: BatchOptions) -> bool:
    if not options.skip_existing:
        return False
    translation = options.longform.task == "both"
    return all(p.is_file() for p in output_paths(options.output_dir / item.stem, options.formats, translation))


def run_batch(items: Sequence[InputItem], options: BatchOptions, err: TextIO | None = None) -> BatchReport:
    """Transcribe every item; one error line per bad item on err. Raises ModelError if the model fails to load."""
    err = err or sys.stderr
    started = time.perf_counter()
    todo = [it for it in items if not _should_skip(it, options)]
    skipped = len(items) - len(todo)
    if not todo:
        return BatchReport(skipped=skipped, wall_seconds=time.perf_counter() - started)
    workers = max(1, min(options.workers, len(todo)))
    progress = BatchProgress(
        sum(probe_duration(it) for it in todo), len(todo), BatchProgress.wanted(options.quiet, err), err
    )
    try:
        if workers == 1:
            done, failed, audio = _run_here(todo, options, err, progress)
        else:
            done, failed, audio = _run_workers(todo, options, workers, err, progress)
    finally:
        progress.close()
    return BatchReport(done, failed, skipped, audio, time.perf_counter() - started)


def _error_line(err: TextIO, display: str, reason: str) -> None:
    print(f"specscribe: error: {display}: {reason}", file=err, flush=True)


def _run_here(items: Sequence[InputItem], options: BatchOptions, err: TextIO, progress: BatchProgress):
    from specscribe.models.engines import load_transcriber

    transcriber = load_transcriber(options.engine)
    done = failed = 0
    audio = 0.0
    for item in items:
        try:
            transcript = transcribe_item(transcriber, item, options, progress)
        except ModelError:
            raise
        except Exception as exc:  # one line per bad file, then the next file
            log.debug("failed on %s", item.display, exc_info=True)
            progress.finish_file()
            _error_line(err, item.display, _reason(exc))
            failed += 1
            continue
        progress.finish_file(transcript.duration)
        audio += transcript.duration
        done += 1
    return done, failed, audio


# --- several processes ------------------------------------------------------------------------
def _split(items: Sequence[InputItem], n: int) -> list[list[InputItem]]:
    """Largest files first, dealt round-robin, so the processes finish at about the same time."""
    order = sorted(items, key=lambda it: -(it.path.stat().st_size if it.path else len(it.data or b"")))
    return [order[i::n] for i in range(n)]


def _worker(items: list[InputItem], options: BatchOptions, events) -> None:
    """Process entry point: load one model, transcribe its share, report on the events queue."""
    from specscribe.models.engines import load_transcriber

    try:
        import torch

        torch.set_num_threads(max(1, options.engine.threads))
    except ImportError:
        pass
    try:
        transcriber = load_transcriber(options.engine)
    except ModelError as exc:
        events.put(("fatal", "", str(exc), 0.0))
        return
    for item in items:
        try:
            transcript = transcribe_item(transcriber, item, options)
        except Exception as exc:
            events.put(("error", item.display, _reason(exc), 0.0))
        else:
            events.put(("done", item.display, "", transcript.duration))
    events.put(("exit", "", "", 0.0))


def _run_workers(items: Sequence[InputItem], options: BatchOptions, n: int, err: TextIO, progress: BatchProgress):
    threads = options.engine.threads or max(1, (os.cpu_count() or 1) // n)
    options = replace(options, engine=replace(options.engine, threads=threads))
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(share, options, events), daemon=True) for share in _split(items, n)]
    for p in procs:
        p.start()
    done = failed = 0
    audio = 0.0
    running = len(procs)
    fatal: str | None = None
    try:
        while running:
            try:
                kind, display, reason, seconds = events.get(timeout=5.0)
            except queue_mod.Empty:  # a worker that died without a word (killed, out of memory)
                alive = sum(p.is_alive() for p in procs)
                if alive < running and events.empty():
                    raise RuntimeError("a worker process died unexpectedly") from None
                continue
            if kind == "exit":
                running -= 1
            elif kind == "fatal":
                running -= 1
                fatal = reason
            elif kind == "error":
                failed += 1
                progress.finish_file()
                _error_line(err, display, reason)
            else:
                done += 1
                audio += seconds
                progress.finish_file(seconds)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    if fatal is not None:
        raise ModelError(fatal)
    return done, failed, audio


def summary_line(report: BatchReport) -> str:
    speed = report.audio_seconds / report.wall_seconds if report.wall_seconds else 0.0
    parts = [f"{report.done} transcribed"]
    if report.failed:
        parts.append(f"{report.failed} failed")
    if report.skipped:
        parts.append(f"{report.skipped} skipped (outputs exist)")
    return (
        f"specscribe: {', '.join(parts)}; {report.audio_seconds:.1f} s of audio in "
        f"{report.wall_seconds:.1f} s ({speed:.1f}x real time)"
    )

