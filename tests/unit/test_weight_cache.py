"""The converted-weight cache (models/weight_cache.py) on a tiny random model.bin in a temp folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from test_weights import tiny_whisper_variables, write_model_bin

from specscribe.models import registry, weight_cache
from specscribe.models.compute import prepare_model
from specscribe.models.weight_cache import load_whisper_model
from specscribe.models.weights import read_model_bin
from specscribe.models.whisper import WhisperModel

ALIASES = {"decoder/projection/weight": "decoder/embeddings/weight"}


@pytest.fixture
def folder(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    write_model_bin(folder / "model.bin", tiny_whisper_variables(), aliases=ALIASES)
    return folder


@pytest.fixture
def counts(monkeypatch):
    """How often model.bin was read and hashed."""
    seen = {"read": 0, "hash": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            seen[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(weight_cache, "read_model_bin", counted("read", weight_cache.read_model_bin))
    monkeypatch.setattr(registry, "sha256_file", counted("hash", registry.sha256_file))
    return seen


def load(folder, cache_dir, compute_type="float32", name="tiny"):
    return load_whisper_model(folder, compute_type, "cpu", name, cache_dir=cache_dir)


def cache_files(cache_dir):
    return sorted(p.name for p in cache_dir.iterdir()) if cache_dir.is_dir() else []


def outputs(model: WhisperModel) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    enc = model.encode(torch.randn(1, 6, 20))  # (1, 10, 8)
    return enc, model.decoder.session(enc).forward([1, 2, 3, 4])  # (4, 30)


def test_written_once_then_reused(folder, tmp_path, counts):
    cache_dir = tmp_path / "cache"
    model, dims = load(folder, cache_dir)
    assert counts == {"read": 1, "hash": 1}  # a user folder: hashed once, when the cache is made
    (name,) = cache_files(cache_dir)
    assert name.startswith("tiny-") and name.endswith("-float32.safetensors")
    stamp = (cache_dir / name).stat().st_mtime_ns
    again, dims2 = load(folder, cache_dir)
    assert counts == {"read": 1, "hash": 1} and (cache_dir / name).stat().st_mtime_ns == stamp
    assert dims2 == dims == model.dims == again.dims
    # bfloat16 has its own file; the int8 types share the float32 one, and keep their int8 linears in their own
    load(folder, cache_dir, "bfloat16")
    load(folder, cache_dir, "int8_float32")
    assert counts["read"] == 2 and len(cache_files(cache_dir)) == 3
    assert cache_files(cache_dir)[2].endswith("-int8_float32.safetensors")


@pytest.mark.parametrize("compute_type", ["float32", "bfloat16", "int8_float32", "int8"])
def test_outputs_bitwise_equal_to_the_uncached_model(folder, tmp_path, compute_type):
    plain = prepare_model(WhisperModel.from_ct2(read_model_bin(folder / "model.bin")), compute_type, "cpu")
    want = outputs(plain)
    for _ in range(2):  # the load that writes the cache, then one from the cache
        model, _ = load(folder, tmp_path / "cache", compute_type)
        got = outputs(model)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
        if compute_type != "int8":  # int8's head is an int8 copy (models/int8.py quantize_decoder)
            assert model.decoder.proj.weight is model.decoder.token_embedding.weight  # still tied
        assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_float16_weights_equal_the_converted_ones(folder, tmp_path):
    plain = prepare_model(WhisperModel.from_ct2(read_model_bin(folder / "model.bin")), "float16", "cpu")
    load(folder, tmp_path / "cache", "float16")
    model, _ = load(folder, tmp_path / "cache", "float16")
    want, got = plain.state_dict(), model.state_dict()
    assert want.keys() == got.keys()
    assert all(got[k].dtype == torch.float16 and torch.equal(got[k], want[k]) for k in want)


def test_rebuilt_when_model_bin_changes(folder, tmp_path, counts):
    cache_dir = tmp_path / "cache"
    before = outputs(load(folder, cache_dir)[0])
    variables = tiny_whisper_variables()
    variables["encoder/layer_norm/beta"] = variables["encoder/layer_norm/beta"] + 1  # same size, new bytes
    write_model_bin(folder / "model.bin", variables, aliases=ALIASES)
    os.utime(folder / "model.bin", ns=(time.time_ns(), time.time_ns() + 10**9))  # mtime surely differs
    model, _ = load(folder, cache_dir)
    assert counts["read"] == 2  # stale: rebuilt
    plain = WhisperModel.from_ct2(read_model_bin(folder / "model.bin"))
    assert all(torch.equal(g, w) for g, w in zip(outputs(model), outputs(plain)))
    assert not torch.equal(outputs(model)[0], before[0])
    load(folder, cache_dir)
    assert counts["read"] == 2 and len(cache_files(cache_dir)) == 1


def test_touched_model_bin_is_rehashed_once_not_rebuilt(folder, tmp_path, counts):
    cache_dir = tmp_path / "cache"
    load(folder, cache_dir)
    os.utime(folder / "model.bin", ns=(time.time_ns(), time.time_ns() + 10**9))  # same bytes, new mtime
    load(folder, cache_dir)
    assert counts == {"read": 1, "hash": 2}  # re-hashed, same sha: kept (with the new mtime)
    load(folder, cache_dir)
    assert counts == {"read": 1, "hash": 2}


def test_catalogue_model_is_checked_by_its_catalogue_sha256(folder, tmp_path, counts, monkeypatch):
    def catalogue(sha: str) -> None:
        entry = registry.CatalogueEntry("tiny-cat", "", (), (), sha, (folder / "model.bin").stat().st_size)
        monkeypatch.setitem(registry.CATALOGUE, "tiny-cat", entry)

    cache_dir = tmp_path / "cache"
    catalogue("a" * 64)
    load(folder, cache_dir, name="tiny-cat")
    os.utime(folder / "model.bin", ns=(time.time_ns(), time.time_ns() + 10**9))  # a reinstall: new mtime
    load(folder, cache_dir, name="tiny-cat")
    assert counts == {"read": 1, "hash": 0} and cache_files(cache_dir) == ["tiny-cat-float32.safetensors"]
    catalogue("b" * 64)  # another release of the model
    load(folder, cache_dir, name="tiny-cat")
    assert counts == {"read": 2, "hash": 0}


@pytest.mark.parametrize("damage", ["truncate", "header", "empty", "dims", "format"])
def test_damaged_cache_is_rebuilt(folder, tmp_path, counts, damage):
    from safetensors import safe_open
    from safetensors.torch import save_file

    cache_dir = tmp_path / "cache"
    want = outputs(load(folder, cache_dir)[0])
    (path,) = cache_dir.iterdir()
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "header":
        path.write_bytes(b"\xff" * 16 + data[16:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a valid safetensors file whose metadata does not describe its tensors
        with safe_open(str(path), framework="pt") as fh:
            meta, tensors = fh.metadata(), {k: fh.get_tensor(k).clone() for k in fh.keys()}
        if damage == "dims":
            meta["dims"] = json.dumps({**json.loads(meta["dims"]), "n_text_layer": 2})
        else:
            meta["format"] = "something-else/9"
        save_file(tensors, str(path), metadata=meta)
    model, _ = load(folder, cache_dir)
    assert counts["read"] == 2
    assert all(torch.equal(g, w) for g, w in zip(outputs(model), want))
    load(folder, cache_dir)
    assert counts["read"] == 2  # the rebuilt file is good


@pytest.mark.parametrize("compute_type", ["int8_float32", "int8"])
def test_int8_linears_come_from_their_file_not_quantized_again(folder, tmp_path, monkeypatch, compute_type):
    from specscribe.models import int8

    cache_dir = tmp_path / "cache"
    want = outputs(load(folder, cache_dir, compute_type)[0])  # quantizes, writes the int8 file
    quantized = []
    original = torch.quantize_per_channel
    monkeypatch.setattr(torch, "quantize_per_channel", lambda *a, **k: quantized.append(1) or original(*a, **k))
    model, _ = load(folder, cache_dir, compute_type)
    assert quantized == [] and all(torch.equal(g, w) for g, w in zip(outputs(model), want))
    assert any(isinstance(m, int8.RowInt8Linear) for m in model.decoder.modules()) == (compute_type == "int8")


@pytest.mark.parametrize("damage", ["made from another model.bin", "a layer missing", "truncated"])
def test_a_stale_or_damaged_int8_file_is_rebuilt(folder, tmp_path, damage):
    from safetensors import safe_open
    from safetensors.torch import save_file

    cache_dir = tmp_path / "cache"
    want = outputs(load(folder, cache_dir, "int8")[0])
    (path,) = [p for p in cache_dir.iterdir() if p.name.endswith("-int8.safetensors")]
    with safe_open(str(path), framework="pt") as fh:
        meta, tensors = fh.metadata(), {k: fh.get_tensor(k).clone() for k in fh.keys()}
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        if damage == "a layer missing":
            del tensors["decoder.proj.qweight"]
        else:
            meta["source_sha256"] = "0" * 64
            tensors = {k: torch.zeros_like(v) if k.endswith("qweight") else v for k, v in tensors.items()}
        save_file(tensors, str(path), metadata=meta)
    model, _ = load(folder, cache_dir, "int8")
    assert all(torch.equal(g, w) for g, w in zip(outputs(model), want))
    with safe_open(str(path), framework="pt") as fh:  # written again, whole, for this model.bin
        assert "decoder.proj.qweight" in fh.keys() and fh.metadata()["source_sha256"] != "0" * 64


def test_unwritable_cache_folder_loads_without_cache(folder, tmp_path, counts):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    for _ in range(2):
        model, _ = load(folder, blocker / "cache")
        assert model.decoder.proj.weight is model.decoder.token_embedding.weight
    assert counts["read"] == 2 and blocker.is_file()


def test_failed_write_leaves_no_file(folder, tmp_path, monkeypatch):
    import safetensors.torch

    def half_written(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", half_written)
    cache_dir = tmp_path / "cache"
    model, _ = load(folder, cache_dir)
    assert outputs(model)[1].shape == (4, 30)
    assert cache_files(cache_dir) == []


def test_stale_temp_files_of_a_killed_writer_are_removed(folder, tmp_path):
    cache_dir = tmp_path / "cache"
    load(folder, cache_dir)
    (name,) = cache_files(cache_dir)
    old, fresh = cache_dir / f".{name}.dead.tmp", cache_dir / f".{name}.busy.tmp"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    long_ago = time.time() - 2 * weight_cache.STALE_TEMP_SECONDS
    os.utime(old, (long_ago, long_ago))
    (cache_dir / name).write_bytes(b"")  # force a rebuild, hence a write
    load(folder, cache_dir)
    assert not old.exists() and fresh.exists()  # another process may still be writing that one


def test_meta_build_does_not_import_dynamo(folder, tmp_path):
    """Random init on the meta device imports torch._dynamo (about 1 s); the loader skips it."""
    args = f"Path({str(folder)!r}), 'bfloat16', 'cpu', 'tiny', Path({str(tmp_path / 'cache')!r})"
    code = (
        "import sys; from pathlib import Path; from specscribe.models.weight_cache import load_whisper_model\n"
        f"for _ in range(2): load_whisper_model({args})  # writes the cache, then maps it\n"
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_missing_model_bin_is_a_model_error(tmp_path):
    from specscribe.models.errors import ModelError

    with pytest.raises(ModelError, match="cannot read"):
        load(tmp_path, tmp_path / "cache")
