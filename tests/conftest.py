"""Shared fixtures. Integration tests need the installed models and clips (`make test` installs them);
they fail with the fixing command rather than skipping, so CI cannot pass by skipping them."""

from __future__ import annotations

from pathlib import Path

import pytest


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
