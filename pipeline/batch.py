"""Batch transcription: inputs -> one loaded model -> transcripts -> output files.

Files are decoded as lanes (pipeline/lanes.py) that share the engine's passes: up to
``batch_size`` lanes at once, from several files, or from stretches of one long file. A file
is cut into ``lanes_for_file`` stretches, in proportion to its share of the audio still to do:
one (Whisper's fully conditioned decode) when the other files fill the batch, more for a file
that would otherwise hold up the end of the batch alone.

A bad file costs exactly one line on stderr (``specscribe: error: FILE: REASON``), leaves no
output behind, and the batch goes on; the caller exits non-zero at the end. A model that cannot
load stops the batch (ModelError, one line from the CLI). With ``workers > 1`` the file list is
split over that many processes, each loading its own model with cores // workers threads; on a
Ray cluster the same _FileRun runs inside Ray actors (pipeline/ray_batch.py). Inputs: pipeline/inputs.py.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import queue as queue_mod
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence, TextIO

import numpy as np

from specscribe.machine import usable_cores
from specscribe.models.engines import EngineOptions, Transcriber
from specscribe.models.errors import ModelError
from specscribe.pipeline.audio import SAMPLE_RATE, AudioError
from specscribe.pipeline.inputs import AudioLoader, InputItem, probe_duration, read_item, seconds_after
from specscribe.pipeline.lanes import Lane, LaneRunner, idle_work
from specscribe.pipeline.longform import (
    FilePlan, LaneOutput, LongformOptions, Transcript, lane_program, merge_lanes, plan_file, split_lanes,
)
from specscribe.pipeline.progress import BatchProgress
from specscribe.pipeline.writers import WriterOptions, output_paths, write_outputs

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16  # the fastest of 1, 4, 8, 16 in scripts/bench_batch.py (docs/benchmarks.md)


@dataclass(frozen=True)
class BatchOptions:
    """Everything a batch run needs.

    Attributes:
        engine: how to load the model.
        longform: decoding options per file.
        writer: output formatting.
        formats: output formats.
        output_dir: where outputs go (sub-folders mirror input directories).
        skip_existing: skip inputs whose outputs all exist (outputs are written atomically, so an
            existing one is complete; an input killed half-way through its outputs is redone).
        workers: processes, each with its own model.
        quiet: no progress bars, no summary.
        batch_size: decodes that share each target pass (lanes in flight); 1 decodes one window
            at a time, in order, as Whisper does.
    """

    engine: EngineOptions = field(default_factory=EngineOptions)
    longform: LongformOptions = field(default_factory=LongformOptions)
    writer: WriterOptions = field(default_factory=WriterOptions)
    formats: tuple[str, ...] = ("txt",)
    output_dir: Path = Path(".")
    skip_existing: bool = False
    workers: int = 1
    quiet: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE


@dataclass(frozen=True)
class BatchReport:
    """How a batch went. Attributes: done, failed, skipped (counts), audio_seconds, wall_seconds."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0


def lanes_for_file(batch_size: int, seconds: float, seconds_left: float) -> int:
    """Stretches to cut a file of ``seconds`` into, when ``seconds_left`` of audio (this file's
    included) remain: its share of the batch, at least one. The last file gets the whole batch."""
    if seconds <= 0 or seconds_left <= 0:
        return 1
    return max(1, min(batch_size, math.ceil(batch_size * seconds / seconds_left - 1e-9)))


@dataclass
class _FileJob:
    """A file whose lanes are in flight: what merging and writing it needs."""

    item: InputItem
    audio: np.ndarray  # (n,) float32 16 kHz
    plan: FilePlan
    lanes: int
    started: float  # perf_counter when its reading began
    outputs: dict[int, LaneOutput] = field(default_factory=dict)


Report = Callable[[InputItem, "Transcript | None", str], None]  # (item, transcript or None, reason)


class _FileRun:
    """Items -> lanes -> transcripts -> outputs, over one transcriber (one process)."""

    def __init__(self, transcriber: Transcriber, options: BatchOptions, progress: BatchProgress | None, report: Report):
        self.transcriber, self.options, self.progress, self.report = transcriber, options, progress, report
        self.runner = LaneRunner(transcriber.decode_loop(), max(1, options.batch_size), idle_work(transcriber))
        self._files: dict[int, _FileJob] = {}

    def run(self, items: Sequence[InputItem], after: Sequence[float], load: AudioLoader | None = None) -> None:
        """after[n]: probed seconds of the run's items after items[n] (lanes_for_file's layout;
        a Ray block passes the whole run's figure, so its files get the lanes of a local run).
        load: an item's float32 16 kHz audio (default: read and decode its file or bytes)."""
        self.runner.run(self._lanes(items, after, load or read_item), self._lane_done, self._lane_failed)

    def _lanes(
        self, items: Sequence[InputItem], after: Sequence[float], load: AudioLoader
    ) -> Iterator[tuple[tuple[int, int], Lane]]:
        longform = self.options.longform
        for n, item in enumerate(items):
            started = time.perf_counter()
            try:
                audio = load(item)
                duration = len(audio) / SAMPLE_RATE
                if self.progress is not None:
                    self.progress.start_file(n, item.display, duration)
                plan = plan_file(self.transcriber, audio, longform)
            except ModelError:
                raise
            except Exception as exc:  # one line for this file, then the next
                self._fail(n, item, exc)
                continue
            left = duration + after[n]
            stretches = split_lanes(plan.windows, lanes_for_file(self.options.batch_size, duration, left))
            self._files[n] = _FileJob(item, audio, plan, len(stretches), started)
            if not stretches:  # no speech at all
                self._finish(n)
                continue
            advance = (lambda s, n=n: self.progress.advance_file(n, s)) if self.progress is not None else None
            for i, windows in enumerate(stretches):
                if n not in self._files:  # an earlier lane of this file failed
                    break
                yield (n, i), lane_program(self.transcriber, audio, plan, windows, longform, advance)

    def _lane_done(self, key: tuple[int, int], output) -> None:
        job = self._files.get(key[0])
        if job is None:
            return
        job.outputs[key[1]] = output
        if len(job.outputs) == job.lanes:
            self._finish(key[0])

    def _lane_failed(self, key: tuple[int, int], exc: BaseException) -> None:
        job = self._files.get(key[0])
        if job is not None:
            self._fail(key[0], job.item, exc)

    def _finish(self, n: int) -> None:
        job = self._files.pop(n)
        item, duration = job.item, len(job.audio) / SAMPLE_RATE
        outputs = [job.outputs[i] for i in range(job.lanes)]
        try:
            transcript = merge_lanes(job.plan, outputs, self.options.longform, item.display, duration,
                                     time.perf_counter() - job.started)
            write_outputs(transcript, self.options.output_dir / item.stem, self.options.formats, self.options.writer)
        except Exception as exc:
            self._files[n] = job
            self._fail(n, item, exc)
            return
        if self.progress is not None:
            self.progress.finish_file(n, duration)
        self.report(item, transcript, "")

    def _fail(self, n: int, item: InputItem, exc: BaseException) -> None:
        log.debug("failed on %s", item.display, exc_info=exc)
        job = self._files.pop(n, None)
        for i in range(job.lanes if job else 0):
            self.runner.cancel((n, i))
        if self.progress is not None:
            self.progress.finish_file(n)
        self.report(item, None, _reason(exc))


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


def pending(items: Sequence[InputItem], options: BatchOptions) -> tuple[list[InputItem], int]:
    """(the items to do, how many --skip-existing skips)."""
    todo = [it for it in items if not _should_skip(it, options)]
    return todo, len(items) - len(todo)


def threads_per_worker(options: BatchOptions, workers: int) -> int:
    """--threads, or this machine's cores shared among the workers."""
    return options.engine.threads or max(1, usable_cores() // workers)


def run_batch(items: Sequence[InputItem], options: BatchOptions, err: TextIO | None = None) -> BatchReport:
    """Transcribe every item; one error line per bad item on err. Raises ModelError if the model fails to load."""
    err = err or sys.stderr
    started = time.perf_counter()
    todo, skipped = pending(items, options)
    if not todo:
        return BatchReport(skipped=skipped, wall_seconds=time.perf_counter() - started)
    workers = max(1, min(options.workers, len(todo)))
    durations = [probe_duration(it) for it in todo]
    progress = BatchProgress(sum(durations), len(todo), BatchProgress.wanted(options.quiet, err), err)
    try:
        if workers == 1:
            done, failed, audio = _run_here(todo, durations, options, err, progress)
        else:
            done, failed, audio = _run_workers(todo, options, workers, err, progress)
    finally:
        progress.close()
    return BatchReport(done, failed, skipped, audio, time.perf_counter() - started)


def _error_line(err: TextIO, display: str, reason: str) -> None:
    print(f"specscribe: error: {display}: {reason}", file=err, flush=True)


def _run_here(
    items: Sequence[InputItem], durations: Sequence[float], options: BatchOptions, err: TextIO, progress: BatchProgress
):
    from specscribe.models.engines import load_transcriber

    transcriber = load_transcriber(options.engine)
    counts = {"done": 0, "failed": 0, "audio": 0.0}

    def report(item: InputItem, transcript: Transcript | None, reason: str) -> None:
        if transcript is None:
            _error_line(err, item.display, reason)
            counts["failed"] += 1
        else:
            counts["done"] += 1
            counts["audio"] += transcript.duration

    _FileRun(transcriber, options, progress, report).run(items, seconds_after(durations))
    return counts["done"], counts["failed"], counts["audio"]


# --- several processes ------------------------------------------------------------------------
def _split(items: Sequence[InputItem], n: int) -> list[list[InputItem]]:
    """Largest files first, dealt round-robin, so the processes finish at about the same time."""
    order = sorted(items, key=lambda it: -(it.path.stat().st_size if it.path else len(it.data or b"")))
    return [order[i::n] for i in range(n)]


def _worker(index: int, items: list[InputItem], options: BatchOptions, events) -> None:
    """Process entry point: load one model, transcribe its share, report on the events queue as
    (worker index, kind, file, reason, seconds)."""
    from specscribe.models.engines import load_transcriber

    try:  # options.engine.threads >= 1 here: each engine sets its own (torch's, or CTranslate2's cpu_threads)
        transcriber = load_transcriber(options.engine)
    except ModelError as exc:
        events.put((index, "fatal", "", str(exc), 0.0))
        return
    def report(item: InputItem, transcript: Transcript | None, reason: str) -> None:
        if transcript is None:
            events.put((index, "error", item.display, reason, 0.0))
        else:
            events.put((index, "done", item.display, "", transcript.duration))

    try:
        _FileRun(transcriber, options, None, report).run(items, seconds_after([probe_duration(it) for it in items]))
    except ModelError as exc:
        events.put((index, "fatal", "", str(exc), 0.0))
        return
    events.put((index, "exit", "", "", 0.0))


def _run_workers(items: Sequence[InputItem], options: BatchOptions, n: int, err: TextIO, progress: BatchProgress,
                 target: Callable = _worker):
    """Transcribe items in n processes. A process that dies without a word (killed, out of memory) loses only
    its own unfinished files, each reported as failed; the others finish their shares."""
    threads = threads_per_worker(options, n)
    options = replace(options, engine=replace(options.engine, threads=threads))
    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    shares = _split(items, n)
    procs = [ctx.Process(target=target, args=(i, share, options, events), daemon=True) for i, share in enumerate(shares)]
    for p in procs:
        p.start()
    done = failed = 0
    audio = 0.0
    ended: set[int] = set()  # workers that said "exit" or "fatal", or died
    reported: set[tuple[int, str]] = set()  # (worker, file) done or failed
    fatal: str | None = None

    def fail(display: str, reason: str) -> None:
        nonlocal failed
        failed += 1
        progress.finish_file(display)
        _error_line(err, display, reason)

    try:
        while len(ended) < len(procs):
            try:
                index, kind, display, reason, seconds = events.get(timeout=5.0)
            except queue_mod.Empty:
                if not events.empty():
                    continue
                for i, p in enumerate(procs):  # a worker that died without a word
                    if i not in ended and not p.is_alive():
                        ended.add(i)
                        why = f"its worker process died (exit code {p.exitcode}: killed, or out of memory?)"
                        for item in shares[i]:
                            if (i, item.display) not in reported:
                                fail(item.display, why)
                continue
            reported.add((index, display))
            if kind in ("exit", "fatal"):
                ended.add(index)
                fatal = reason if kind == "fatal" else fatal
            elif kind == "error":
                fail(display, reason)
            else:
                done += 1
                audio += seconds
                progress.finish_file(display, seconds)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    if fatal is not None:
        raise ModelError(fatal)
    return done, failed, audio


def summary_line(report: BatchReport) -> str:
    parts = [f"{report.done} transcribed"]
    if report.failed:
        parts.append(f"{report.failed} failed")
    if report.skipped:
        parts.append(f"{report.skipped} skipped (outputs exist)")
    if not report.done:  # nothing decoded (all skipped, failed or missing): no audio figures to give
        return f"specscribe: {', '.join(parts)}"
    speed = report.audio_seconds / report.wall_seconds if report.wall_seconds else 0.0
    return (
        f"specscribe: {', '.join(parts)}; {report.audio_seconds:.1f} s of audio in "
        f"{report.wall_seconds:.1f} s ({speed:.1f}x real time)"
    )

