"""Whisper in torch: the model (its encoder in models/encoder.py), reusable decoder layers, and a KV-cached
decoder session per window.

Architecture (as CTranslate2 runs it): pre-LN transformer, exact (erf) GELU, attention scale
1/sqrt(head_dim), LayerNorm eps 1e-5, sinusoid encoder positions as stored, learned decoder
positions, output projection tied to the token embedding, no embedding scale.

API:
    model = WhisperModel.from_ct2(read_model_bin(path))         # float32 modules
    enc = model.encode(mel)                                     # mel (1, n_mels, 3000) -> (1, 1500, d)
    session = model.decoder.session(enc)                        # cross-attention K/V computed here, once
    logits = session.forward([sot, lang, task])                 # (T, V) float32, one pass
    logits, scores = session.forward(tokens, return_cross_attention=True)
        # scores: (n_layers, n_heads, T, n_audio_ctx) float32, the *pre-softmax* scaled q.k
        # cross-attention logits (as openai/whisper's QKs used for word alignment); softmax them
        # over the first num_frames // 2 audio positions yourself.
    session.crop(n); session.length                             # roll back rejected tokens

Building a draft decoder from the target's layers (shared embedding, positions, final LN, head):
    target = model.decoder
    draft = TextDecoder(target.token_embedding, target.positional_embedding,
                        [copy.deepcopy(target.layers[0]), copy.deepcopy(target.layers[-1])],
                        target.ln, target.proj)
    draft_session = draft.session(enc)      # a DecoderSession with its own KVCache
``DecoderSession`` works for any stack of ``DecoderLayer`` modules; each layer owns its
self-attention, cross-attention and MLP, and knows nothing about its index in the stack.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from specscribe.models.encoder import LN_EPS, MLP, AudioEncoder, split_heads
from specscribe.models.invariant import PassShape, RowBlocks, attend, attend_blocks, causal_mask, cross_attend_plain
from specscribe.models.kv_cache import KVCache
from specscribe.models.weights import Ct2Model, WhisperDims, torch_state_dict

class DecoderLayer(nn.Module):
    """Pre-LN causal self-attention (KV-cached) + cross-attention + MLP. Reusable in any stack.

    ``forward`` runs the rows of one pass: the rows of every sequence in it, stacked (see
    ``TextDecoder.run_pass``). Row-wise work goes through ``blocks``; attention is per sequence.
    """

    def __init__(self, d: int, n_heads: int, d_ff: int):
        super().__init__()
        self.n_heads = n_heads
        self.attn_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.cross_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.cross_q = nn.Linear(d, d)
        self.cross_kv = nn.Linear(d, 2 * d)
        self.cross_out = nn.Linear(d, d)
        self.mlp_ln = nn.LayerNorm(d, eps=LN_EPS)
        self.mlp = MLP(d, d_ff)

    def cross_keys_values(self, enc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """enc (1, S, d) -> K, V (1, H, S, Dh), computed once per window."""
        k, v = self.cross_kv(enc).chunk(2, dim=-1)
        return split_heads(k, self.n_heads).contiguous(), split_heads(v, self.n_heads).contiguous()

    def forward(
        self,
        x: torch.Tensor,  # (R, d): every row of the pass (R = blocks.padded)
        blocks: RowBlocks,
        seqs: Sequence["_SeqRows"],
        index: int,  # this layer's slot in the caches
        want_scores: bool = False,
        shape: PassShape | None = None,  # the pass's fixed shapes (None with blocks.size 0)
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Returns the new rows (R, d) and, with want_scores, per sequence the pre-softmax
        cross-attention logits (H, T, S) (openai/whisper's QKs, for word alignment)."""
        h, d = self.n_heads, x.shape[1]
        invariant = shape is not None
        q, k, v = blocks.map(lambda b: self.qkv(self.attn_ln(b)), x).split(d, dim=-1)  # (R, d) each
        a = torch.zeros_like(x)  # (R, d); padding rows stay zero
        for s in seqs:
            rows = s.rows
            keys, values = s.cache.write(index, k[rows].view(s.n, h, -1), v[rows].view(s.n, h, -1), full=invariant)
            out = attend(q[rows].view(s.n, h, -1), keys, values, s.mask, s.start, s.group, shape)
            a[rows] = out.reshape(s.n, d)
        x = x + blocks.map(self.out, a)

        q = blocks.map(lambda b: self.cross_q(self.cross_ln(b)), x)  # (R, d)
        all_scores = []
        for s in seqs:
            rows = s.rows
            ck, cv = s.cross[index]  # (1, H, S, Dh)
            qh = q[rows].view(s.n, h, -1)  # (T, H, Dh)
            if want_scores:
                scores = (qh.transpose(0, 1) @ ck[0].transpose(-1, -2)) * (qh.shape[-1] ** -0.5)  # (H, T, S)
                out = (torch.softmax(scores.float(), dim=-1).to(q.dtype) @ cv[0]).transpose(0, 1)  # (T, H, Dh)
                all_scores.append(scores.float())
            elif invariant:
                out = attend_blocks(qh, ck, cv, shape.query_block, s.group)
            else:
                out = cross_attend_plain(qh, ck, cv)
            a[rows] = out.reshape(s.n, d)
        x = x + blocks.map(self.cross_out, a)
        x = x + blocks.map(lambda b: self.mlp(self.mlp_ln(b)), x)
        return x, all_scores


class StateFuse(nn.Module):
    """A feature drafter's input (models/feature_draft.py): linear([state, token embedding]), 2d -> d.

    Each state row is RMS-normalised to ``scale`` first: the target's final-LN states are about 400x
    the token embeddings' scale (base: rms 11 against 0.028), which would swamp the embedding half.
    A zero row (a prompt position: no state) stays zero.
    """

    def __init__(self, d: int, scale: float = 1.0):
        super().__init__()
        self.linear = nn.Linear(2 * d, d)
        self.register_buffer("scale", torch.tensor(float(scale)))

    def forward(self, states: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """states, embedded (..., d) -> (..., d)."""
        s = states.float()
        s = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-12) * self.scale.float()
        return self.linear(torch.cat([s.to(embedded.dtype), embedded], dim=-1))


class TextDecoder(nn.Module):
    """A stack of DecoderLayers around a token embedding, positions, final LN and output head.

    The parts are modules (or a buffer) so that a draft decoder can share the target's.

    Attributes:
        pass_shape: the fixed shapes that make every pass batch-invariant (models/invariant.py),
            set on the target by the engine; None runs each pass in as few kernel calls as
            possible, whose results depend on the row count (draft decoders, training).
    """

    def __init__(
        self,
        token_embedding: nn.Embedding,  # (V, d)
        positional_embedding: torch.Tensor,  # (n_text_ctx, d)
        layers: Sequence[DecoderLayer],
        ln: nn.LayerNorm,
        proj: nn.Linear,  # d -> V, weight tied to token_embedding (untied only after quantization)
        fuse: StateFuse | None = None,  # a feature drafter's input (models/feature_draft.py)
    ):
        super().__init__()
        self.token_embedding = token_embedding
        self.register_buffer("positional_embedding", positional_embedding)
        self.layers = nn.ModuleList(layers)
        self.ln = ln
        self.proj = proj
        self.fuse = fuse
        self.pass_shape: PassShape | None = None

    @property
    def n_ctx(self) -> int:
        return self.positional_embedding.shape[0]

    def cross_keys_values(self, enc: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer K, V (1, H, S, Dh) over enc (1, S, d); reusable by every session on the window."""
        with torch.inference_mode():
            enc = enc.to(self.positional_embedding.dtype)
            return [layer.cross_keys_values(enc) for layer in self.layers]

    def session(self, enc: torch.Tensor, cross: list | None = None) -> "DecoderSession":
        return DecoderSession(self, enc, cross)

    def run_pass(self, parts: Sequence[PassPart], want_scores: bool = False) -> list[PassOutput]:
        """ONE decoder pass over the rows of several sessions of this decoder.

        Each part appends its tokens to its own session's cache. Returns, per part, the logits
        (T - logits_from, V) float32 (row i predicts the token after tokens[logits_from + i])
        and, with want_scores, the cross-attention logits (n_layers, H, T, S) float32.
        Each part's session keeps the final-LN hidden states of those rows as ``hidden``
        (T - logits_from, d): what a feature drafter reads. With a fuse module (a feature drafter),
        a row's input is fuse(features, token embedding) + position, so every part must carry features.
        With a pass_shape, a part's outputs are bitwise the same whatever the other parts are.
        """
        shape = self.pass_shape
        groups = []  # per part: leading rows that are its prompt, attended as one group
        for part in parts:
            n, start = len(part.tokens), part.session.cache.length
            if n == 0:
                raise ValueError("a pass part needs at least one token")
            if start + n > self.n_ctx:
                raise ValueError(f"decoder context full: {start + n} > {self.n_ctx} positions")
            if self.fuse is not None and (part.features is None or part.features.shape[0] != n):
                raise ValueError("a feature drafter's pass part needs one feature row per token")
            groups.append(n if part.prompt_rows is None and start == 0 else min(part.prompt_rows or 0, n))
        # Row order: with a pass shape, every part's prompt group first (each one call of its own in the
        # row-wise work, RowBlocks), then the other rows of every part; without one, each part in turn.
        lead = groups if shape is not None else [0] * len(parts)
        order = [(j, i) for j, g in enumerate(lead) for i in range(g)]  # (part, token) of each row
        order += [(j, i) for j, (p, g) in enumerate(zip(parts, lead)) for i in range(g, len(p.tokens))]
        seqs, at_group, at_rest = [], 0, sum(lead)
        for part, group, g in zip(parts, groups, lead):
            session, n = part.session, len(part.tokens)
            start = session.cache.length
            mask = None
            if shape is None and n > 1:  # row i attends to positions <= start + i (attend builds its own)
                mask = causal_mask(start, n, start + n, session.positions.device)
            rows = _rows(at_group, g, at_rest, n - g)
            seqs.append(_SeqRows(rows, n, start, session.cache, session.cross, mask, group))
            at_group, at_rest = at_group + g, at_rest + n - g
        ids = [parts[j].tokens[i] for j, i in order]
        device = self.positional_embedding.device
        blocks = RowBlocks(shape.rows if shape is not None else 0, len(ids), lead)
        if shape is not None and shape.whole is None and blocks.calls > 1:  # probed once, at first need
            from specscribe.models.row_calls import whole_calls_ok

            shape = self.pass_shape = dataclasses.replace(shape, whole=whole_calls_ok(self, shape.rows))
        if shape is not None and shape.whole:  # row-wise work in whole calls (PassShape.whole)
            blocks = RowBlocks(shape.rows, len(ids), whole=True)
        with torch.inference_mode():
            pos = torch.tensor([seqs[j].start + i for j, i in order], device=device)  # (R,)
            x = self.token_embedding(torch.tensor(ids, dtype=torch.long, device=device))  # (R, d)
            if self.fuse is not None:
                f = torch.cat([parts[j].features[i : i + 1] for j, i in order])  # (R, d)
                x = self.fuse(f.to(device=device, dtype=x.dtype), x.to(self.positional_embedding.dtype))
            x = x + self.positional_embedding[pos]
            x = blocks.pad(x.to(self.positional_embedding.dtype))  # (R_pad, d)
            scores: list[list[torch.Tensor]] = [[] for _ in parts]
            for i, layer in enumerate(self.layers):
                x, layer_scores = layer(x, blocks, seqs, i, want_scores, shape)
                for j, sc in enumerate(layer_scores):
                    scores[j].append(sc)
            for s in seqs:
                s.cache.advance(s.n)
            wanted = [_row_index(s.rows, device)[p.logits_from :] for s, p in zip(seqs, parts)]
            index = torch.cat(wanted)  # (N,)
            if len(index):
                heads = RowBlocks(blocks.size, len(index), whole=blocks.whole)
                normed = heads.map(self.ln, heads.pad(x.index_select(0, index)))  # (N_pad, d)
                logits = heads.map(self.proj, normed)[: len(index)].float().split([len(w) for w in wanted])
                hidden = normed[: len(index)].split([len(w) for w in wanted])
            else:  # no row asked for the head (an alignment pass)
                logits = [x.new_zeros(0, self.proj.out_features, dtype=torch.float32) for _ in wanted]
                hidden = [x.new_zeros(0, x.shape[1]) for _ in wanted]
            for part, h in zip(parts, hidden):
                part.session.hidden = h
        return [PassOutput(lg, torch.stack(sc) if want_scores else None) for lg, sc in zip(logits, scores)]


@dataclass(frozen=True)
class PassPart:
    """One session's share of a decoder pass.

    Attributes:
        session: the DecoderSession whose cache the tokens are appended to.
        tokens: the token ids to append.
        logits_from: the first row that goes through the output head (earlier rows only feed
            the cache: a prompt's).
        prompt_rows: how many leading rows are the session's prompt, attended as one group
            (models/invariant.py); None: all of them when the session is fresh, else none.
        features: (T, d) a feature drafter's input features, one per token (else None).
    """

    session: "DecoderSession"
    tokens: Sequence[int]
    logits_from: int = 0
    prompt_rows: int | None = None
    features: torch.Tensor | None = None


@dataclass(frozen=True)
class PassOutput:
    """Attributes: logits (T - logits_from, V) float32; scores (n_layers, H, T, S) float32 or None."""

    logits: torch.Tensor
    scores: torch.Tensor | None = None


@dataclass(frozen=True)
class _SeqRows:
    """Where a sequence's rows sit in a pass, and what they attend to."""

    rows: slice | torch.Tensor  # its n rows in the pass, in order: a slice, or (n,) indices (prompt group apart)
    n: int
    start: int  # the position of the first row
    cache: KVCache
    cross: list  # per layer (K, V), each (1, H, S, Dh)
    mask: torch.Tensor | None  # (n, L) bool, the plain path's causal mask (None: invariant, or one row)
    group: int  # leading rows attended as one group


def _rows(group_at: int, group: int, rest_at: int, rest: int) -> slice | torch.Tensor:
    """A sequence's rows in a pass whose prompt groups come first: its group's, then its other rows."""
    if not rest:
        return slice(group_at, group_at + group)
    if not group:
        return slice(rest_at, rest_at + rest)
    return torch.cat([torch.arange(group_at, group_at + group), torch.arange(rest_at, rest_at + rest)])


def _row_index(rows: slice | torch.Tensor, device) -> torch.Tensor:
    """(n,) row indices of a _SeqRows.rows."""
    return torch.arange(rows.start, rows.stop, device=device) if isinstance(rows, slice) else rows.to(device)


class DecoderSession:
    """A TextDecoder bound to one window's encoder output, with its own KVCache.

    Implements the DecoderSession protocol of models/interfaces.py. Many sessions of one
    decoder can share a pass (``TextDecoder.run_pass``).
    """

    def __init__(self, decoder: TextDecoder, enc: torch.Tensor, cross: list | None = None):
        # enc (1, S, d); cross: precomputed decoder.cross_keys_values(enc), or None to compute it
        self.decoder, self.enc = decoder, enc
        layer0 = decoder.layers[0]
        d = decoder.positional_embedding.shape[1]
        self.dtype = decoder.positional_embedding.dtype
        self.cross = cross if cross is not None else decoder.cross_keys_values(enc)
        self.cache = KVCache(
            len(decoder.layers), layer0.n_heads, d // layer0.n_heads, decoder.n_ctx, self.dtype, enc.device
        )
        self.positions = torch.arange(decoder.n_ctx, device=enc.device)  # (n_ctx,)
        self.hidden: torch.Tensor | None = None  # (rows, d) final-LN states of the last pass's head rows

    @property
    def length(self) -> int:
        return self.cache.length

    def crop(self, length: int) -> None:
        self.cache.crop(length)

    def fork(self) -> "DecoderSession":
        """A new session on the same window (cross K/V shared) whose cache copies this one's."""
        other = DecoderSession(self.decoder, self.enc, cross=self.cross)
        other.cache.copy_from(self.cache)
        return other

    def copy_from(self, other: "DecoderSession") -> None:
        """Take over other's cache contents (a spare session reused for a new beam)."""
        self.cache.copy_from(other.cache)

    def forward(
        self,
        tokens: Sequence[int],
        return_cross_attention: bool = False,
        logits_from: int = 0,
        prompt_rows: int | None = None,
        features: torch.Tensor | None = None,
    ):
        """Append T tokens in one pass (a pass of this session alone; see PassPart for the
        arguments). Returns logits (T - logits_from, V) float32, and with
        return_cross_attention also the cross-attention logits (n_layers, n_heads, T, S)."""
        part = PassPart(self, tokens, logits_from, prompt_rows, features)
        out = self.decoder.run_pass([part], return_cross_attention)[0]
        return (out.logits, out.scores) if return_cross_attention else out.logits


class WhisperModel(nn.Module):
    """Encoder + decoder. ``encode`` once per window, then ``decoder.session(enc)`` per decode."""

    def __init__(self, dims: WhisperDims):
        super().__init__()
        self.dims = dims
        d, v = dims.n_text_state, dims.n_vocab
        self.encoder = AudioEncoder(dims)
        embedding = nn.Embedding(v, d)
        proj = nn.Linear(d, v, bias=False)
        proj.weight = embedding.weight  # tied
        layers = [DecoderLayer(d, dims.n_text_head, 4 * d) for _ in range(dims.n_text_layer)]
        self.decoder = TextDecoder(
            embedding, torch.zeros(dims.n_text_ctx, d), layers, nn.LayerNorm(d, eps=LN_EPS), proj
        )

    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (1, n_mels, 3000) float -> encoder output (1, 1500, d) in the model's dtype."""
        with torch.inference_mode():
            return self.encoder(mel.to(self.encoder.conv1.weight.dtype))

    def session(self, enc: torch.Tensor) -> DecoderSession:
        return self.decoder.session(enc)

    @classmethod
    def from_ct2(cls, ct2: Ct2Model) -> "WhisperModel":
        """Build a float32 model from a CTranslate2 WhisperSpec (any size, any stored dtype)."""
        dims = WhisperDims.from_model(ct2)
        with torch.device("meta"):  # no random init: every weight comes from the file
            model = cls(dims)
        sd = torch_state_dict(ct2, dims)
        missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
        missing = [m for m in missing if m != "decoder.proj.weight"]
        if missing or unexpected:
            raise ValueError(f"weight mapping mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
        model.decoder.proj.weight = model.decoder.token_embedding.weight  # re-tie after assign
        return model.eval()
