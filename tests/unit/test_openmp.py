"""An OpenMP pool left on a thread is released (models/openmp.py), and the scheduler releases its caller's."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest
import torch

from specscribe.models import openmp
from specscribe.pipeline import scheduler as scheduler_module
from specscribe.pipeline.scheduler import ModelScheduler

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def _in_thread(fn):
    out: dict = {}

    def work() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.fixture
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(saved)


def test_a_threads_pool_goes_when_released(two_threads):
    pytest.importorskip("ctranslate2")  # its own libgomp, loaded beside torch's: both must be asked
    if not openmp._runtimes():
        pytest.skip("no OpenMP runtime with omp_pause_resource_all in this process")

    def run() -> tuple[int, int, int, bool]:
        before = _tasks()
        torch.ones(1 << 20).sum()  # a kernel big enough to run on both intra-op threads: a pool of 1 worker
        with_pool = _tasks()
        released = openmp.release_openmp_pool()
        return before, with_pool, _tasks(), released

    before, with_pool, after, released = _in_thread(run)
    assert released
    assert with_pool == before + 1, "the kernel should have started one OpenMP worker on this thread"
    assert after == before, "release_openmp_pool should end the calling thread's worker"


def test_release_without_a_pool_is_harmless():
    assert _in_thread(openmp.release_openmp_pool) in (True, False)
    assert torch.ones(3).sum().item() == 3.0  # torch still works on a thread whose pool was released


class _Fake:
    name = "fake"


def test_scheduler_releases_the_starting_threads_pool_before_its_model_thread_starts(monkeypatch):
    calls = []

    def record() -> bool:
        calls.append((threading.current_thread(), [t.name for t in threading.enumerate()]))
        return True

    monkeypatch.setattr(scheduler_module, "release_openmp_pool", record)
    others = [t.name for t in threading.enumerate()].count("model")  # model threads other tests left in this process

    async def main():
        sched = ModelScheduler(_Fake())
        first = await sched.run("a", lambda tr: tr.name)
        second = await sched.run("a", lambda tr: tr.name)
        await sched.close()
        return first, second, threading.current_thread()

    first, second, loop_thread = asyncio.run(main())
    assert (first, second) == ("fake", "fake")
    assert len(calls) == 1, "released once, when the model thread starts"
    caller, names = calls[0]
    assert caller is loop_thread
    assert names.count("model") == others, "the pool must go before the model thread starts its own"
