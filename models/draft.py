"""The draft decoder: a shallow decoder on the target's encoder output, and its drafter.

``DraftDecoder`` is a ``TextDecoder`` (models/whisper.py) whose token embedding, positional
embedding, final LayerNorm and tied output projection ARE the target's (the same modules, not
copies), with 1-2 layers of its own, initialised as copies of target decoder layers (default:
the first and the last). It reads the target's encoder output; no second encoder runs. Its cross
K/V are its own (its layers may be distilled away from the target's), computed once per window.

Checkpoints are safetensors files holding only the draft's own layers, with metadata: the
format, the layer sources, the dims, and the sha256 of the target's model.bin. Loading against
another target raises ModelError.

    draft = DraftDecoder.from_target(engine.model.decoder, sources=(0, -1))
    draft.save("draft.safetensors", target_sha256=sha256_file(folder / "model.bin"))
    draft = DraftDecoder.load("draft.safetensors", engine.model.decoder, target_sha256)
    drafter = DraftDecoderDrafter(draft, encoded.handle, rules)   # one decode of one window
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from specscribe.models.drafters import Draft
from specscribe.models.errors import ModelError
from specscribe.models.interfaces import LogitRules
from specscribe.models.kv_cache import CrossKVCache
from specscribe.models.whisper import DecoderLayer, DecoderSession, StateFuse, TextDecoder

FORMAT = "specscribe-draft-decoder"
VERSION = "1"
# Below this validation acceptance a draft decoder costs more than it saves on a CPU (draft step
# ~15 % of a target step, a k+1-row verify pass ~1.5 single steps: bench_speculative.py), so
# the fixed `auto` rule does not draft with it for that language group and task (models/draft_policy.py).
AUTO_MIN_ACCEPTANCE = 0.5


def draft_group(language: str, task: str) -> str:
    """The group a (language, task) falls in for a draft's figures: "en-transcribe", "xx-transcribe",
    "xx-translate" (the per-group validation of its card, online adaptation, the drafting policy)."""
    return f"{'en' if language == 'en' else 'xx'}-{task}"


class DraftDecoder:
    """A shallow TextDecoder sharing the target's embeddings, final LN and head.

    Attributes:
        decoder: the TextDecoder (its own ``layers``; shared everything else).
        sources: for each layer, the index of the target layer it was initialised from.
    """

    def __init__(
        self,
        target: TextDecoder,
        layers: Sequence[DecoderLayer],
        sources: Sequence[int],
        vocab_ids: torch.Tensor | None = None,
        fuse: StateFuse | None = None,
    ):
        if not 1 <= len(layers) == len(sources):
            raise ValueError("a draft decoder needs at least one layer and one source index per layer")
        proj = target.proj
        self.vocab_ids = None  # (N,) long: the token id of each row of a reduced head
        if vocab_ids is not None:
            # a head over N << V rows of the tied embedding: the full (V, d) head is most of a
            # draft step's cost, and the draft only needs to propose tokens the target often emits
            emb = target.token_embedding.weight  # (V, d), never quantized
            self.vocab_ids = vocab_ids.long().to(emb.device)
            proj = nn.Linear(emb.shape[1], len(self.vocab_ids), bias=False, device=emb.device, dtype=emb.dtype)
            proj.weight = nn.Parameter(emb.detach()[self.vocab_ids].clone(), requires_grad=False)  # (N, d)
        # fuse: a feature-level draft (models/feature_draft.py), which reads the target's
        # hidden states; None: a draft decoder on token embeddings
        self.decoder = TextDecoder(target.token_embedding, target.positional_embedding, list(layers), target.ln, proj, fuse)
        self.sources = tuple(int(s) for s in sources)
        # validation acceptance by group ("en-transcribe", "xx-transcribe", "xx-translate") from
        # the checkpoint's training summary; `auto` drafts with this decoder only where it is high
        self.group_acceptance: dict[str, float] = {}
        self.shared_cross_kv = False  # True: the layers' cross K/V projections are the target's own
        # where a loaded draft came from (load): its checkpoint and the target sha256 it was checked
        # against; None for untrained copies (from_target). --adapt-draft trains from these.
        self.checkpoint: Path | None = None
        self.target_sha256: str | None = None
        self._cross = CrossKVCache()  # cross K/V per window in use

    @classmethod
    def from_target(cls, target: TextDecoder, sources: Sequence[int] = (0, -1)) -> "DraftDecoder":
        """Copies of target layers ``sources`` (negative counts from the end; duplicates allowed)."""
        n = len(target.layers)
        idx = [s % n for s in sources]
        if any(not -n <= s < n for s in sources):
            raise ValueError(f"layer sources {tuple(sources)} out of range for {n} target layers")
        draft = cls(target, [copy.deepcopy(target.layers[i]) for i in idx], idx)
        draft.shared_cross_kv = True  # untrained copies: same cross projections as the target
        return draft

    @property
    def is_feature(self) -> bool:
        """A feature-level draft: its input is [the target's hidden state, the token]."""
        return self.decoder.fuse is not None

    # --- windows --------------------------------------------------------------------------
    def session(self, enc: torch.Tensor, target_cross: list | None = None) -> DecoderSession:
        """A fresh session (own KV cache) on enc (1, S, d); cross K/V computed once per window.

        target_cross: the target's per-layer cross K/V on enc, reused when the draft's cross
        projections are the target's own (untrained copies, or ``shared_cross_kv`` checkpoints).
        """

        def compute() -> list:
            if target_cross is not None and self.shared_cross_kv:
                return [target_cross[s] for s in self.sources]
            return self.decoder.cross_keys_values(enc)

        cross, _ = self._cross.get(enc, compute)
        return DecoderSession(self.decoder, enc, cross=cross)

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """(N,) logits of a reduced head -> (V,), -inf outside it (so the target's logit rules
        and token ids apply unchanged); the full head's (V,) logits pass through."""
        if self.vocab_ids is None:
            return logits
        n_vocab = self.decoder.token_embedding.weight.shape[0]
        full = torch.full((n_vocab,), float("-inf"), dtype=logits.dtype, device=logits.device)
        return full.index_copy_(0, self.vocab_ids, logits)

    def quantize_int8(self) -> None:
        """Dynamic int8 for the draft's own layers and its reduced head (not the shared full head)."""
        from specscribe.models.compute import prepare_model

        self.decoder.layers = prepare_model(self.decoder.layers, "int8", "cpu")
        if self.decoder.fuse is not None:
            self.decoder.fuse = prepare_model(nn.ModuleList([self.decoder.fuse]), "int8", "cpu")[0]
        if self.vocab_ids is not None:
            self.decoder.proj = prepare_model(nn.ModuleList([self.decoder.proj]), "int8", "cpu")[0]

    # --- checkpoints ----------------------------------------------------------------------
    def metadata(self, target_sha256: str) -> dict[str, str]:
        layer0 = self.decoder.layers[0]
        dims = {
            "n_text_state": int(self.decoder.positional_embedding.shape[1]),
            "n_text_head": int(layer0.n_heads),
            "n_text_ctx": int(self.decoder.n_ctx),
            "n_vocab": int(self.decoder.token_embedding.weight.shape[0]),
            "n_layers": len(self.decoder.layers),
        }
        return {
            "format": FORMAT,
            "version": VERSION,
            "layer_sources": json.dumps(list(self.sources)),
            "kind": "feature" if self.is_feature else "decoder",
            "dims": json.dumps(dims),
            "target_sha256": target_sha256,
        }

    def save(self, path: str | Path, target_sha256: str) -> None:
        """Write the draft's own layers (float32) and metadata to a safetensors file."""
        from safetensors.torch import save_file

        tensors = {f"layers.{k}": v.detach().float().contiguous().clone() for k, v in self.decoder.layers.state_dict().items()}
        if self.vocab_ids is not None:
            tensors["vocab_ids"] = self.vocab_ids.to(torch.int32).cpu().contiguous()
        if self.is_feature:
            tensors |= {f"fuse.{k}": v.detach().float().contiguous().clone() for k, v in self.decoder.fuse.state_dict().items()}
        save_file(tensors, str(path), metadata=self.metadata(target_sha256))

    @classmethod
    def load(cls, path: str | Path, target: TextDecoder, target_sha256: str) -> "DraftDecoder":
        """Load a checkpoint for ``target``; ModelError when it is unreadable or for another target.

        The layers take the dtype and device of the target's decoder layers' parameters (or
        float32 if these are quantized; quantize the returned decoder yourself then).
        """
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise ModelError(f"draft checkpoint {path} does not exist")
        try:
            with safe_open(str(path), framework="pt") as fh:
                meta = fh.metadata() or {}
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        except Exception as exc:  # safetensors raises its own SafetensorError and OSError
            raise ModelError(f"draft checkpoint {path} is unreadable ({exc})") from None
        if meta.get("format") != FORMAT:
            raise ModelError(f"{path} is not a specscribe draft-decoder checkpoint")
        if meta.get("target_sha256") != target_sha256:
            raise ModelError(
                f"draft checkpoint {path} was made for another target model "
                f"(sha256 {meta.get('target_sha256', '?')[:12]}..., this target {target_sha256[:12]}...)"
            )
        try:
            dims = json.loads(meta["dims"])
            sources = json.loads(meta["layer_sources"])
        except (KeyError, ValueError):
            raise ModelError(f"draft checkpoint {path} has broken metadata") from None
        d, heads = dims["n_text_state"], dims["n_text_head"]
        if d != target.positional_embedding.shape[1] or dims["n_vocab"] != target.token_embedding.weight.shape[0]:
            raise ModelError(f"draft checkpoint {path} does not fit this target's dimensions")
        from specscribe.models.weight_cache import weightless

        with weightless():  # every weight comes from the checkpoint (assign=True below)
            layers = nn.ModuleList(DecoderLayer(d, heads, 4 * d) for _ in range(dims["n_layers"]))
        vocab_ids = tensors.get("vocab_ids")
        if vocab_ids is not None:
            vocab_ids = vocab_ids.long()
            n_vocab = dims["n_vocab"]
            if vocab_ids.ndim != 1 or not len(vocab_ids) or int(vocab_ids.min()) < 0 or int(vocab_ids.max()) >= n_vocab:
                raise ModelError(f"draft checkpoint {path} has a broken reduced vocabulary (vocab_ids)")
        state = {k.removeprefix("layers."): v for k, v in tensors.items() if k.startswith("layers.")}
        try:
            layers.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as exc:
            raise ModelError(f"draft checkpoint {path} does not match its own dims ({str(exc).splitlines()[0]})") from None
        fuse = None
        fuse_state = {k.removeprefix("fuse."): v for k, v in tensors.items() if k.startswith("fuse.")}
        if fuse_state or meta.get("kind") == "feature":
            with weightless():
                fuse = StateFuse(d)
            try:
                fuse.load_state_dict(fuse_state, strict=True, assign=True)
            except RuntimeError as exc:
                raise ModelError(f"draft checkpoint {path} has a broken feature fusion ({str(exc).splitlines()[0]})") from None
        layers, fuse = fit_to_target(target, layers, fuse)
        draft = cls(target, list(layers), sources, vocab_ids, fuse)
        draft.checkpoint, draft.target_sha256 = path, target_sha256
        draft.shared_cross_kv = meta.get("shared_cross_kv") == "true"
        draft.group_acceptance = _group_acceptance(meta.get("training"))
        return draft

    def pays_for(self, language: str, task: str) -> bool:
        """Whether `auto` should draft with this decoder for (language, task): its validation
        acceptance there is at least AUTO_MIN_ACCEPTANCE (unknown groups: yes)."""
        return self.group_acceptance.get(draft_group(language, task), 1.0) >= AUTO_MIN_ACCEPTANCE


def fit_to_target(target: TextDecoder, layers: nn.ModuleList, fuse: StateFuse | None) -> tuple[nn.ModuleList, StateFuse | None]:
    """Draft modules in eval mode, in the dtype and on the device of the target's decoder layers
    (float32 if these are quantized: quantize the draft yourself then, models/draft_loading.py prepare_draft)."""
    ref = next((p for p in target.layers.parameters() if p.is_floating_point()), None)
    if ref is not None:
        layers = layers.to(device=ref.device, dtype=ref.dtype)
        fuse = None if fuse is None else fuse.to(device=ref.device, dtype=ref.dtype)
    return layers.eval(), None if fuse is None else fuse.eval()


def _group_acceptance(training: str | None) -> dict[str, float]:
    """{group: acceptance} from a checkpoint's "training" metadata (export.py), {} if absent."""
    try:
        groups = json.loads(training or "{}").get("val", {}).get("groups", {})
        return {name: float(g["acceptance"]) for name, g in groups.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def draft_token(draft: DraftDecoder, head: torch.Tensor, rules: LogitRules | None, context: Sequence[int],
                temperature: float, generator: torch.Generator | None, probs: list[torch.Tensor]) -> int:
    """One draft token from a draft step's head logits (N,): scattered to the full vocabulary, filtered
    by the target's rules (context: the tokens generated so far), then the argmax, or a sample at
    temperature > 0 whose distribution q (V,) is appended to probs."""
    logits = draft.full_logits(head)  # (V,)
    if rules is not None:
        logits = rules.apply(logits, context)
    if temperature <= 0:
        return int(torch.argmax(logits))
    q = torch.softmax(logits / temperature, dim=-1)  # (V,)
    probs.append(q)
    return int(torch.multinomial(q.cpu(), 1, generator=generator))  # CPU generators


class DraftDecoderDrafter:
    """Drafts with a DraftDecoder over one window: greedy argmax, or samples (with q) at T > 0.

    ``eot`` ends a draft. ``rules`` (the target's LogitRules, optional) filter the draft's logits too, so it never
    proposes what the target may not emit (timestamps where text must come, suppressed tokens).
    Its KV cache follows the verifier: cropped to the common prefix with the accepted output.
    """

    name = "decoder"
    cheap = False  # a model: each proposed token is a draft-decoder step of its own

    def __init__(
        self,
        draft: DraftDecoder,
        enc: torch.Tensor,
        rules: LogitRules | None = None,
        eot: int | None = None,
        target_cross: list | None = None,
        max_k: int = 8,
    ):
        self.draft, self.enc, self.rules, self.eot = draft, enc, rules, eot
        self.target_cross = target_cross
        self.max_k = max_k  # a draft step costs ~1/6 of a target pass: longer rounds rarely pay
        self.session: DecoderSession | None = None
        self._cached: list[int] = []  # the tokens in the session's cache
        self._prompt: list[int] = []
        self.temperature, self.generator = 0.0, None

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        self.session = self.draft.session(self.enc, self.target_cross)
        self._prompt, self._cached = list(prompt), []
        self.temperature, self.generator = temperature, generator

    def _sync(self, seq: Sequence[int], keep_last: bool) -> None:
        """Crop the cache to its common prefix with seq (leaving seq's last token out if keep_last)."""
        n = 0
        limit = min(len(self._cached), len(seq) - (1 if keep_last else 0))
        while n < limit and self._cached[n] == seq[n]:
            n += 1
        if n < len(self._cached):
            self.session.crop(n)
            del self._cached[n:]

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        assert self.session is not None, "begin() first"
        seq = self._prompt + list(generated)
        self._sync(seq, keep_last=True)
        k = min(k, self.max_k, self.session.decoder.n_ctx - len(seq))
        if k <= 0:
            return Draft(())
        feed = seq[len(self._cached) :]  # at least the last token
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for _ in range(k):
            head = self.session.forward(feed)[-1]  # (N,)
            self._cached += feed
            token = draft_token(self.draft, head, self.rules, list(generated) + tokens, self.temperature, self.generator, probs)
            tokens.append(token)
            if token == self.eot:  # nothing follows end-of-text
                break
            feed = [token]
        return Draft(tuple(tokens), torch.stack(probs) if probs else None)

    def accept(self, generated: Sequence[int], features: torch.Tensor | None = None) -> None:
        if self.session is not None:
            self._sync(self._prompt + list(generated), keep_last=False)

    def finish(self) -> None:
        self.session, self._cached = None, []
