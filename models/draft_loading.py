"""Which draft decoder an engine serves, and readying it: the shipped checkpoint for a model, a
``--draft-model`` file checked against the target's sha256, or untrained copies of the target's layers;
int8 or oneDNN-prepacked for inference (``prepare_draft``, also for an adapted draft, models/adapt.py).

    draft = load_draft_decoder(model.decoder, folder, "base", None, "bfloat16", untrained_ok=False)
"""

from __future__ import annotations

from pathlib import Path

from specscribe.models.compute import INT8_TYPES, pack_decoder
from specscribe.models.draft import DraftDecoder
from specscribe.models.whisper import TextDecoder


def shipped_checkpoint(model_name: str) -> Path | None:
    """models/drafts/<name>-draft.safetensors, if this package ships one for the model."""
    path = Path(__file__).parent / "drafts" / f"{Path(model_name).name}-draft.safetensors"
    return path if path.is_file() else None


def target_sha256(folder: Path, model_name: str) -> str:
    """The catalogue's checksum for a catalogue model (installed with a checked sha256), else hashed."""
    from specscribe.models.registry import CATALOGUE, sha256_file

    entry = CATALOGUE.get(model_name)
    return entry.sha256 if entry is not None else sha256_file(Path(folder) / "model.bin")


def checkpoint_target(path: Path) -> str | None:
    """The target sha256 a draft checkpoint was made for (None if unreadable)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            return (fh.metadata() or {}).get("target_sha256")
    except Exception:  # an unreadable file: DraftDecoder.load reports it
        return None


def load_draft_decoder(
    target: TextDecoder,
    folder: Path,
    model_name: str,
    draft_model: str | None,
    compute_type: str,
    untrained_ok: bool,
    mismatch_ok: bool = False,
) -> DraftDecoder | None:
    """The draft decoder an engine should use: ``draft_model`` if given, else the shipped
    checkpoint for the model, else (``untrained_ok``) copies of the target's first and last
    layers, else None. ``mismatch_ok``: a ``draft_model`` made for another target gives None instead
    of a ModelError. The shipped checkpoint is found by the model's (folder) name, so it is used only
    where its target is this model: a user's own folder called "base" holding another model gets none.
    Loaded drafts are int8 under the int8 compute types (drafts need not be lossless: the target
    verifies every token)."""
    path = Path(draft_model).expanduser() if draft_model else shipped_checkpoint(model_name)
    if path is None:
        return DraftDecoder.from_target(target) if untrained_ok else None
    sha = target_sha256(folder, model_name)
    if checkpoint_target(path) != sha:
        if not draft_model:  # shipped for another model of that name: as if none were shipped
            return DraftDecoder.from_target(target) if untrained_ok else None
        if mismatch_ok:
            return None
    return prepare_draft(DraftDecoder.load(path, target, sha), compute_type)


def prepare_draft(draft: DraftDecoder, compute_type: str) -> DraftDecoder:
    """Ready a loaded (or adapted) draft for inference: int8 under the int8 compute types, else
    oneDNN-prepacked weights for its one-token steps (a plain, not batch-invariant, decoder)."""
    if compute_type in INT8_TYPES:
        draft.quantize_int8()
    else:
        pack_decoder(draft.decoder, 1)
    return draft
