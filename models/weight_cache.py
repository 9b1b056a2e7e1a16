"""A cache of converted weights: model.bin read and converted once, then memory-mapped.

The first load per (model, stored dtype) reads model.bin (models/weights.py), converts it and
writes the state dict as ``<cache_dir>/<model>-<dtype>.safetensors``; later loads map that file
(no copy) into a model built on the meta device. The int8 compute types read the float32 file and
keep their int8 linears in a second file, ``<model>-<compute type>.safetensors`` (int8 weights and
their scales, models/int8.py int8_tensors): quantizing base's encoder took about 0.1 s of each start-up
(prepacking them for fbgemm is still done at load). The metadata names the source model.bin (sha256, size,
mtime_ns): a catalogue model is checked against the catalogue's sha256 without hashing, a user
folder's model.bin is re-hashed only when its size or mtime changed. A missing, stale, truncated
or unreadable file is rebuilt (debug log); writes go through a temp file and os.replace, and an
unwritable cache folder only means loading without the cache.

    model, dims = load_whisper_model(folder, "bfloat16", "cpu", "base")   # prepared, ready to run
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import contextlib
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode

from specscribe.models.compute import INT8_TYPES, prepare_model
from specscribe.models.errors import ModelError
from specscribe.models.weights import WhisperDims, read_model_bin
from specscribe.models.whisper import WhisperModel

log = logging.getLogger(__name__)

FORMAT = "specscribe-weight-cache/1"
STORED_DTYPE = {  # compute type -> dtype of the cached weights (int8: float32, and the int8 linears in a file of their own)
    "float32": "float32", "int8": "float32", "int8_float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
}  # fmt: skip
TIED = "decoder.proj.weight"  # the output head: the token embedding's tensor, not stored twice
STALE_TEMP_SECONDS = 600  # temp files older than this are left-overs of a killed writer


@dataclass(frozen=True)
class SourceStamp:
    """The model.bin a cache file was made from.

    Attributes:
        sha256: checksum of model.bin.
        size: its size in bytes.
        mtime_ns: its modification time (ns).
    """

    sha256: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class CachedWeights:
    """What a cache file holds.

    Attributes:
        source: the model.bin it was made from.
        dims: the model's dimensions (from the file's metadata).
        tensors: WhisperModel.state_dict() names -> tensors mapped from the file, TIED left out;
            e.g. decoder.token_embedding.weight (n_vocab, n_text_state), encoder.conv1.weight
            (n_audio_state, n_mels, 3), encoder.positional_embedding (n_audio_ctx, n_audio_state).
    """

    source: SourceStamp
    dims: WhisperDims
    tensors: dict[str, torch.Tensor]


@dataclass(frozen=True)
class WeightCache:
    """One cache file: a WhisperModel state dict in one dtype.

    Attributes:
        path: the safetensors file.
        dtype: the stored dtype ("float32", "bfloat16" or "float16").
    """

    path: Path
    dtype: str

    def read(self) -> CachedWeights | None:
        """The file's contents, or None when it is missing or unreadable (not checked against a source)."""
        from safetensors import SafetensorError, safe_open

        if not self.path.is_file():
            return None
        try:
            with safe_open(str(self.path), framework="pt") as fh:
                meta = fh.metadata() or {}
                if meta.get("format") != FORMAT or meta.get("dtype") != self.dtype:
                    raise ValueError(f"format {meta.get('format')!r}, dtype {meta.get('dtype')!r}")
                source = SourceStamp(meta["source_sha256"], int(meta["source_size"]), int(meta["source_mtime_ns"]))
                dims = WhisperDims(**{k: int(v) for k, v in json.loads(meta["dims"]).items()})
                tensors = {name: fh.get_tensor(name) for name in fh.keys()}
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
            log.debug("weight cache %s unreadable (%s: %s); rebuilding it", self.path, type(exc).__name__, exc)
            return None
        return CachedWeights(source, dims, tensors)

    def write(self, tensors: dict[str, torch.Tensor], dims: WhisperDims, source: SourceStamp) -> None:
        """Store tensors (a state dict in self.dtype, or int8_tensors' output) atomically; a failed write only logs."""
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        meta = {
            "format": FORMAT, "dtype": self.dtype, "dims": json.dumps(dataclasses.asdict(dims)),
            "source_sha256": source.sha256, "source_size": str(source.size), "source_mtime_ns": str(source.mtime_ns),
        }  # fmt: skip
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._remove_stale_temps()
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            os.close(fd)
            save_file(tensors, tmp, metadata=meta)
            os.replace(tmp, self.path)
            tmp = None
        except (OSError, SafetensorError) as exc:
            log.debug("weight cache %s not written (%s); loading without it", self.path, exc)
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def _remove_stale_temps(self) -> None:
        cutoff = time.time() - STALE_TEMP_SECONDS
        for old in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            try:
                if old.stat().st_mtime < cutoff:
                    old.unlink()
            except OSError:
                pass


class _SkipInit(TorchFunctionMode):
    """Skips torch.nn.init calls. A module built on the meta device still runs its random init,
    and meta normal_ imports torch._dynamo (about 1 s); every weight comes from a file anyway."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def weightless() -> Iterator[None]:
    """Build modules with no memory and no random init (meta device, nn.init skipped): for modules
    whose every weight is then assigned from a file (``load_state_dict(..., assign=True)``)."""
    with torch.device("meta"), _SkipInit():
        yield


def model_from_tensors(dims: WhisperDims, tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> WhisperModel:
    """A WhisperModel that uses the given tensors (no copy); ValueError when they do not fit dims."""
    with weightless():
        model = WhisperModel(dims)
    wrong = [name for name, t in tensors.items() if t.dtype != dtype]
    if wrong:
        raise ValueError(f"{wrong[0]} is {tensors[wrong[0]].dtype}, not {dtype}")
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    except RuntimeError as exc:  # size mismatch
        raise ValueError(str(exc).splitlines()[0]) from None
    if missing != [TIED] or unexpected:
        raise ValueError(f"weight names differ: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.decoder.proj.weight = model.decoder.token_embedding.weight  # re-tie after assign
    return model.eval()


def convert_model_bin(bin_path: Path, dtype: torch.dtype) -> tuple[WhisperModel, WhisperDims]:
    """model.bin -> a WhisperModel in dtype (on CPU), as prepare_model converts it."""
    ct2 = read_model_bin(bin_path)
    dims = WhisperDims.from_model(ct2)
    with _SkipInit():
        model = WhisperModel.from_ct2(ct2)
    del ct2
    return (model if dtype == torch.float32 else model.to(dtype)), dims


def cache_file_name(folder: Path, model_name: str, catalogue: bool, dtype: str) -> str:
    """base-bfloat16.safetensors for a catalogue model; <folder name>-<path hash>-<dtype>... else."""
    if catalogue:
        return f"{model_name}-{dtype}.safetensors"
    where = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", folder.resolve().name)[:40] or "model"
    return f"{stem}-{where}-{dtype}.safetensors"


def load_whisper_model(
    folder: Path, compute_type: str, device: str, model_name: str, cache_dir: Path | None = None
) -> tuple[WhisperModel, WhisperDims]:
    """The model of folder/model.bin, through prepare_model for compute_type (concrete, not
    "auto") and device. cache_dir: default specscribe_home()/cache."""
    from specscribe.models.registry import CATALOGUE, sha256_file, specscribe_home

    if compute_type not in STORED_DTYPE:
        raise ValueError(f"unknown compute type {compute_type!r}; choose {', '.join(STORED_DTYPE)}")
    dtype_name, dtype = STORED_DTYPE[compute_type], getattr(torch, STORED_DTYPE[compute_type])
    bin_path = Path(folder) / "model.bin"
    try:
        stat = bin_path.stat()  # before any read: a later change shows as a new mtime
    except OSError as exc:
        raise ModelError(f"cannot read {bin_path}: {exc.strerror or exc}") from None
    entry = CATALOGUE.get(model_name)
    catalogue_sha = entry.sha256 if entry is not None and entry.size == stat.st_size else None
    name = cache_file_name(Path(folder), model_name, catalogue_sha is not None, dtype_name)
    cache = WeightCache(Path(cache_dir if cache_dir is not None else specscribe_home() / "cache") / name, dtype_name)
    int8 = None  # the int8 linears' own file, under the int8 compute types
    if compute_type in INT8_TYPES:
        int8 = WeightCache(cache.path.with_name(cache_file_name(Path(folder), model_name, catalogue_sha is not None,
                                                                compute_type)), compute_type)

    cached, current = cache.read(), None
    if cached is not None:
        if catalogue_sha is None and (cached.source.size, cached.source.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
            current = cached.source  # an unchanged user file keeps its recorded sha256
        else:  # the catalogue's checksum, or a changed user file hashed again
            current = SourceStamp(catalogue_sha or sha256_file(bin_path), stat.st_size, stat.st_mtime_ns)
        try:
            if cached.source.sha256 != current.sha256:
                raise ValueError("made from another model.bin")
            model = model_from_tensors(cached.dims, cached.tensors, dtype)
        except ValueError as exc:
            log.debug("weight cache %s is stale or does not fit (%s); rebuilding it", cache.path, exc)
        else:
            if current != cached.source:  # same bytes, new mtime: record it
                cache.write(state_tensors(model), cached.dims, current)
            return prepare_cached(model, compute_type, device, int8, current), cached.dims
    current = current or SourceStamp(catalogue_sha or sha256_file(bin_path), stat.st_size, stat.st_mtime_ns)
    model, dims = convert_model_bin(bin_path, dtype)
    cache.write(state_tensors(model), dims, current)
    return prepare_cached(model, compute_type, device, int8, current), dims


def state_tensors(model: WhisperModel) -> dict[str, torch.Tensor]:
    """What the weight file of a model holds: its state dict, the tied head left out."""
    return {k: v for k, v in model.state_dict().items() if k != TIED}


def prepare_cached(model: WhisperModel, compute_type: str, device: str, int8: WeightCache | None,
                   source: SourceStamp) -> WhisperModel:
    """prepare_model; with int8 (the int8 compute types' file), the int8 linears come from it when it was made
    from the same model.bin, else they are quantized here and the file is (re)written."""
    if int8 is None or device != "cpu":
        return prepare_model(model, compute_type, device)
    from specscribe.models.int8 import int8_tensors

    stored = int8.read()
    if stored is not None and stored.source.sha256 == source.sha256:
        try:
            return prepare_model(model, compute_type, device, int8_weights=stored.tensors)
        except ValueError as exc:
            log.debug("int8 weight cache %s does not fit (%s); rebuilding it", int8.path, exc)
    model = prepare_model(model, compute_type, device)  # what a partial load above swapped already stays swapped
    int8.write(int8_tensors(model), model.dims, source)
    return model
