"""The target's float32 decoder for training, and the draft checkpoint writer.

Checkpoints are what models/draft.py's ``DraftDecoder.load`` reads (format, version,
layer_sources, dims, target_sha256 metadata; ``layers.{i}.{param}`` tensors), stored in fp16 to
stay small, with extra metadata: "shared_cross_kv" (the layers' cross-attention K/V projections
are the target's own, so the target's cross K/V of those layers can be reused) and "training"
(a JSON summary). A reduced-vocabulary head adds a ``vocab_ids`` tensor, and a feature draft
(feature_net.py) its ``fuse.*`` tensors and metadata kind=feature; DraftDecoder.load reads both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from specscribe.models.distill.net import DraftNet
from specscribe.models.whisper import TextDecoder


def load_target_decoder(model: str) -> tuple[TextDecoder, dict[str, Any]]:
    """(float32 TextDecoder of the target, {eot, n_vocab, sha256, model, ...})."""
    from specscribe.models.registry import CATALOGUE, resolve_model, sha256_file
    from specscribe.models.tokenizer import WhisperTokenizer
    from specscribe.models.weights import WhisperDims, read_model_bin
    from specscribe.models.whisper import WhisperModel

    folder = resolve_model(model)
    ct2 = read_model_bin(folder / "model.bin")
    dims = WhisperDims.from_model(ct2)
    whisper = WhisperModel.from_ct2(ct2)
    del ct2
    tokenizer = WhisperTokenizer.from_folder(folder, dims.n_vocab >= 51865)
    entry = CATALOGUE.get(model)
    sha = entry.sha256 if entry is not None else sha256_file(folder / "model.bin")
    info = {
        "model": model,
        "sha256": sha,
        "eot": tokenizer.eot,
        "n_vocab": dims.n_vocab,
        "n_text_layer": dims.n_text_layer,
        "timestamp_begin": tokenizer.timestamp_begin,
    }
    decoder = whisper.decoder
    for p in decoder.parameters():
        p.requires_grad_(False)
    return decoder, info


def draft_state(net: DraftNet, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for i, layer in enumerate(net.layers):
        for name, tensor in layer.state_dict().items():
            state[f"layers.{i}.{name}"] = tensor.detach().to(dtype).contiguous().clone()
    if net.vocab_ids is not None:
        state["vocab_ids"] = net.vocab_ids.to(torch.int32).contiguous()
    fuse = getattr(net, "fuse", None)  # a FeatureDraftNet's input fusion
    if fuse is not None:
        for name, tensor in fuse.state_dict().items():
            state[f"fuse.{name}"] = tensor.detach().to(dtype).contiguous().clone()
    return state


def draft_metadata(net: DraftNet, target: TextDecoder, target_sha256: str) -> dict[str, str]:
    """models/draft.py's metadata for these layers (format, version, sources, dims, target sha256)."""
    from specscribe.models.draft import DraftDecoder

    return DraftDecoder(target, list(net.layers), net.source_layers, fuse=getattr(net, "fuse", None)).metadata(target_sha256)


def export_draft(
    net: DraftNet, path: Path, target: TextDecoder, target_sha256: str, training: dict[str, Any]
) -> Path:
    """Write the checkpoint (fp16) and PATH.sha256, each atomically (a reader, or an engine
    loading it meanwhile, sees the old file or the new one); returns the path."""
    from safetensors.torch import save_file

    from specscribe.models.registry import sha256_file

    metadata = draft_metadata(net, target, target_sha256)
    metadata["shared_cross_kv"] = "true" if net.freeze_cross_kv else "false"
    metadata["training"] = json.dumps(training, default=str)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    save_file(draft_state(net), str(partial), metadata=metadata)
    digest = Path(str(path) + ".sha256.partial")
    digest.write_text(f"{sha256_file(partial)}  {path.name}\n")
    os.replace(partial, path)
    os.replace(digest, str(path) + ".sha256")
    return path


def checkpoint_sources(path: Path) -> tuple[int, ...]:
    """The target layer indices a checkpoint's layers were copied from."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return tuple(int(i) for i in json.loads((fh.metadata() or {})["layer_sources"]))


def load_draft_into(net: DraftNet, path: Path) -> dict[str, str]:
    """Load a checkpoint written by export_draft into a DraftNet built on the same target layers."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        metadata = fh.metadata() or {}
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    for i, layer in enumerate(net.layers):
        own = {k.split(".", 2)[2]: v.float() for k, v in tensors.items() if k.startswith(f"layers.{i}.")}
        layer.load_state_dict(own, strict=True)
    if "vocab_ids" in tensors:
        net.vocab_ids = tensors["vocab_ids"].long()
    fuse = {k.removeprefix("fuse."): v.float() for k, v in tensors.items() if k.startswith("fuse.")}
    if fuse and getattr(net, "fuse", None) is not None:
        net.fuse.load_state_dict(fuse, strict=True)
    return metadata
