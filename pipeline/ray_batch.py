"""Batch transcription through Ray Data: the local batch's outputs, from actors on many machines.

    driver: the inputs (skip-existing, probed durations) ──► ray.data.from_items(one row per file)
      ── map(decode_row)              CPU tasks: read, decode and resample to 16 kHz float32
      ── map_batches(FileTranscriber) actors, each holding one loaded engine: a block of files is
                                      decoded together as lanes of the batched engine (pipeline/batch.py
                                      _FileRun), and each file's outputs are written atomically by the actor
      ──► driver: one result row per file (progress bar, error lines, counts, exit status)

Same text as a local run: a file's lanes (lanes_for_file) depend on the audio that follows it in the
whole run, so each row carries that figure from the driver, and batch invariance makes a file's
tokens independent of the files it shares passes with.

Faults: Ray Data restarts a transcriber actor whose process died and runs its block again (its actor
pools default to max_restarts and max_task_retries -1). A block run again rewrites its files atomically
(write_outputs first removes the temporary files a killed writer left), and the driver counts each file
once, from the block that finished. A bad file fails alone: its decode error travels in its row.

The output folder must be storage that every node sees at the same path, and every node needs
specscribe and the model installed (docs/scaling.md).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence, TextIO

import numpy as np

from specscribe.models.errors import ModelError
from specscribe.pipeline.batch import (
    BatchOptions, BatchReport, _error_line, _FileRun, _reason, pending, threads_per_worker,
)
from specscribe.pipeline.inputs import InputItem, probe_duration, read_item, seconds_after
from specscribe.pipeline.progress import BatchProgress

INSTALL_HINT = "--ray needs Ray Data: pip install 'specscribe[ray]'"
FILES_PER_TASK = 8  # files an actor decodes together (pass sharing) and redoes if it dies (retry cost)
# Decoding is lighter than a transcriber's share of the machine; resources unlike the actors' also
# keep Ray from fusing the decode into the actors, so it runs in tasks of its own, ahead of them.
DECODE_CPUS = 0.5


@dataclass(frozen=True)
class RayOptions:
    """Attributes: address ("local" starts a Ray instance on this machine; else ray.init's address,
    e.g. "auto" or "ray://head:10001"); workers (transcriber actors); files_per_task (at most,
    per actor call)."""

    address: str = "local"
    workers: int = 1
    files_per_task: int = FILES_PER_TASK


def import_ray() -> Any:
    """ray, with Ray Data; raises ImportError with INSTALL_HINT when it is missing."""
    try:
        import ray
        import ray.data  # noqa: F401  (the extra brings pyarrow and pandas along)
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return ray


def file_rows(items: Sequence[InputItem], durations: Sequence[float]) -> list[dict[str, Any]]:
    """One row per input: where it is, its output stem and the probed audio after it in the run."""
    return [
        {
            "index": n,
            "display": item.display,
            "path": "" if item.path is None else str(item.path.resolve()),
            "data": item.data,  # stdin's bytes, else None
            "stem": str(item.stem),
            "after": after,
        }
        for n, (item, after) in enumerate(zip(items, seconds_after(durations)))
    ]


def row_item(row: dict[str, Any]) -> InputItem:
    path = row["path"]
    return InputItem(row["display"], Path(path) if path else None, Path(row["stem"]), row.get("data"))


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    """A Ray task: the row's audio, or the reason it cannot be read (the file then fails alone)."""
    try:
        audio, error = read_item(row_item(row)), ""
    except Exception as exc:
        audio, error = np.zeros(0, np.float32), _reason(exc)
    out = {k: row[k] for k in ("index", "display", "path", "stem", "after")}
    return {**out, "audio": audio, "error": error}


class FileTranscriber:
    """A Ray Data actor: one loaded engine; each call transcribes a block of decoded files and
    writes their outputs. Returns one result row per file: index, display, error ("" when done),
    seconds of audio, and the actor's pid."""

    def __init__(self, options: BatchOptions) -> None:
        from specscribe.models.engines import load_transcriber

        self.options = options  # engine.threads >= 1: the engine sets its own threads
        self.transcriber = load_transcriber(options.engine)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list]:
        rows = [{k: batch[k][i] for k in batch} for i in range(len(batch["index"]))]
        # by the row's index: two inputs can share a display name (the same file given twice; their stems differ)
        results: dict[int, tuple[str, float]] = {}
        good = [r for r in rows if not r["error"]]
        items = [row_item(r) for r in good]
        audio = {item: np.asarray(r["audio"], dtype=np.float32) for item, r in zip(items, good)}
        index = {item: int(r["index"]) for item, r in zip(items, good)}

        def report(item: InputItem, transcript, reason: str) -> None:
            results[index[item]] = (reason, 0.0) if transcript is None else ("", transcript.duration)

        _FileRun(self.transcriber, self.options, None, report).run(
            items, [float(r["after"]) for r in good], audio.__getitem__
        )
        for r in rows:
            if r["error"]:
                results[int(r["index"])] = (str(r["error"]), 0.0)
        missing = ("the batch ended without a result for this file", 0.0)  # never expected: fail it, visibly
        outcome = [results.get(int(r["index"]), missing) for r in rows]
        return {
            "index": [int(r["index"]) for r in rows],
            "display": [str(r["display"]) for r in rows],
            "error": [error for error, _ in outcome],
            "seconds": [seconds for _, seconds in outcome],
            "worker": [os.getpid()] * len(rows),
        }


def _start(ray: Any, address: str, cpus: float) -> bool:
    """Connect to (or start) Ray; True when this call started it (and must shut it down).

    Unless specscribe logs at debug level, Ray's own chatter stays off the terminal (its start-up
    notes, the C++ core worker's log lines, the workers' output): the driver reports every file's
    outcome itself, and a failed run as one line. Ray's logs stay in /tmp/ray/session_*/logs. One
    line remains: Ray's core worker says that it took its log level from RAY_BACKEND_LOG_LEVEL.
    """
    if ray.is_initialized():
        return False
    debug = logging.getLogger("specscribe").isEnabledFor(logging.DEBUG)
    level = logging.INFO if debug else logging.ERROR
    if not debug:
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        logging.getLogger("ray").setLevel(logging.ERROR)
    common = {"log_to_driver": debug, "logging_level": level}
    if address == "local":
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, **common)
    else:
        ray.init(address=address, **common)
    if not debug:
        logging.getLogger("ray.data").setLevel(logging.ERROR)
    return True


def run_ray_batch(
    items: Sequence[InputItem], options: BatchOptions, ray_options: RayOptions, err: TextIO | None = None
) -> BatchReport:
    """Transcribe every item on Ray; one error line per bad item on err (as run_batch does).
    Raises ModelError when the model cannot load on a worker or the Ray run fails as a whole."""
    err = err or sys.stderr
    ray = import_ray()
    started = time.perf_counter()
    todo, skipped = pending(items, options)
    if not todo:
        return BatchReport(skipped=skipped, wall_seconds=time.perf_counter() - started)
    workers = max(1, min(ray_options.workers, len(todo)))
    threads = threads_per_worker(options, workers)
    options = replace(options, engine=replace(options.engine, threads=threads), output_dir=options.output_dir.resolve())
    durations = [probe_duration(it) for it in todo]
    per_task = max(1, min(ray_options.files_per_task, math.ceil(len(todo) / workers)))
    # one logical CPU per actor thread, and one over for two decode tasks at a time
    owns = _start(ray, ray_options.address, threads * workers + 2 * DECODE_CPUS)
    progress = BatchProgress(sum(durations), len(todo), BatchProgress.wanted(options.quiet, err), err)
    done = failed = 0
    audio = 0.0
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        results = (
            ray.data.from_items(file_rows(todo, durations), override_num_blocks=len(todo))
            .map(decode_row, num_cpus=DECODE_CPUS)
            .map_batches(
                FileTranscriber, fn_constructor_args=(options,), batch_size=per_task, num_cpus=threads,
                compute=ray.data.ActorPoolStrategy(size=workers), batch_format="numpy",
            )
        )
        for row in results.iter_rows():
            if row["error"]:
                failed += 1
                progress.finish_file(None)
                _error_line(err, row["display"], row["error"])
            else:
                done += 1
                audio += float(row["seconds"])
                progress.finish_file(None, float(row["seconds"]))
    except Exception as exc:
        if isinstance(exc, ModelError):
            raise
        raise ModelError(f"the Ray run failed: {_root_cause(exc)}") from exc
    finally:
        progress.close()
        if owns:
            ray.shutdown()
    return BatchReport(done, failed, skipped, audio, time.perf_counter() - started)


def _root_cause(exc: BaseException) -> str:
    """The innermost error's one line (Ray wraps a worker's exception in its own)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    return str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
