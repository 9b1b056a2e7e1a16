"""`transcribe --workers N`: a worker process that dies loses only its own unfinished files (pipeline/batch.py
_run_workers); fake workers, no model."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from specscribe.pipeline.batch import BatchOptions, _run_workers
from specscribe.pipeline.inputs import InputItem
from specscribe.pipeline.progress import BatchProgress


def _fake_worker(index, items, options, events):
    """Worker 0 reports its first file and dies as an out-of-memory kill would; the others finish."""
    for k, item in enumerate(items):
        if index == 0 and k == 1:
            time.sleep(0.5)  # the queue's feeder thread sends the first report (os._exit would drop it)
            os._exit(9)
        events.put((index, "done", item.display, "", 1.0))
    events.put((index, "exit", "", "", 0.0))


def test_a_dead_worker_fails_its_own_unfinished_files_and_the_others_finish(tmp_path):
    items = []
    for i in range(6):
        path = tmp_path / f"f{i}.wav"
        path.write_bytes(b"x" * (100 - i))  # sizes decide the deal: f0, f2, f4 to worker 0
        items.append(InputItem(str(path), path, Path(f"f{i}")))
    err = io.StringIO()
    done, failed, audio = _run_workers(items, BatchOptions(), 2, err, BatchProgress(6.0, 6, False), target=_fake_worker)
    assert (done, failed, audio) == (4, 2, 4.0)  # worker 0 finished f0 only; worker 1 all three
    lines = err.getvalue().splitlines()
    assert sorted(line.split(": ")[2] for line in lines) == [str(tmp_path / "f2.wav"), str(tmp_path / "f4.wav")]
    assert all("worker process died (exit code 9" in line for line in lines)
