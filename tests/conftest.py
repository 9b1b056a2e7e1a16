"""Shared fixtures. Integration tests need the installed models and clips (`make test` installs them);
they fail with the fixing command rather than skipping, so CI cannot pass by skipping them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _pin_xdist_worker() -> None:
    """Under `pytest -n N` (pytest-xdist), give each worker its own share of the CPUs: its affinity mask, and as
    many OpenMP threads, before torch or CTranslate2 is imported. Two workers that each ran two OpenMP threads
    on two cores would make every pool sleep between kernels (models/openmp.py). Subprocesses inherit both."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < count:
        return
    share = cpus[int(worker[2:]) % count :: count]
    os.sched_setaffinity(0, share)
    os.environ["OMP_NUM_THREADS"] = str(len(share))


_pin_xdist_worker()


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def clips_dir() -> Path:
    from specscribe.clips import clips_dir

    folder = clips_dir()
    if not (folder / "jfk.flac").is_file():
        pytest.fail(f"clips missing in {folder}: run `specscribe clips install` (make test does)")
    return folder


@pytest.fixture(scope="session")
def base_model_dir() -> Path:
    from specscribe.models.registry import resolve_model

    return resolve_model("base")
