"""Our own reader of CTranslate2's ``model.bin`` and the Whisper dimensions read from it.

The format (ctranslate2/specs/model_spec.py, ``ModelSpec._serialize``; little-endian):

    u32 binary_version            (>= 2: spec name and revision follow)
    str spec_name                 (str = u16 length incl. NUL, bytes, NUL)
    u32 spec_revision
    u32 n_variables
    n_variables x { str name, u8 rank, u32 dims[rank],
                    u8 dtype_id (version >= 4; older: item size), u32 n_bytes (older: n_items), bytes }
    u32 n_aliases                 (version >= 3)
    n_aliases x { str alias, str target }

dtype ids: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. Quantized weights (int8,
int16) come with ``<name>_scale``; the float weight is ``q / scale`` (one scale per output row).
Scalars (``num_heads``, flags) are rank-0 variables.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from specscribe.models.errors import ModelError

_DTYPES = {
    0: torch.float32,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.float16,
    5: torch.bfloat16,
}
_LEGACY_ITEM_SIZE = {4: torch.float32, 2: torch.int16, 1: torch.int8}
MAX_BINARY_VERSION = 6


class _Cursor:
    """Sequential reads over the file's bytes, with a clear error when it ends early."""

    def __init__(self, data: bytearray, path: Path):
        self.data = data
        self.pos = 0
        self.path = path

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ModelError(f"{self.path} is truncated (wanted {n} bytes at offset {self.pos})")
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))

    def string(self) -> str:
        (n,) = self.unpack("H")
        raw = bytes(self.take(n))
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{self.path} is not a CTranslate2 model.bin (bad string at {self.pos})") from None


@dataclass(frozen=True)
class Ct2Model:
    """The raw contents of a model.bin.

    Attributes:
        spec: the spec name, e.g. "WhisperSpec".
        revision: the spec revision.
        binary_version: the file format version.
        variables: name -> tensor as stored (aliases resolved to the same tensor object).
    """

    spec: str
    revision: int
    binary_version: int
    variables: dict[str, torch.Tensor]

    def has(self, name: str) -> bool:
        return name in self.variables

    def raw(self, name: str) -> torch.Tensor:
        try:
            return self.variables[name]
        except KeyError:
            raise ModelError(f"model.bin has no variable {name!r} (not a Whisper model?)") from None

    def scalar(self, name: str) -> int:
        return int(self.raw(name).reshape(-1)[0].item())

    def float(self, name: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The variable as floats: int8/int16 weights are dequantized with ``<name>_scale``."""
        value = self.raw(name)
        if value.dtype in (torch.int8, torch.int16):
            scale_name = name + "_scale"
            if scale_name in self.variables:
                scale = self.variables[scale_name].to(torch.float32)
                q = value.to(torch.float32)
                if scale.dim() == 1 and q.dim() >= 1 and scale.numel() == q.shape[0]:
                    scale = scale.reshape(-1, *([1] * (q.dim() - 1)))
                return (q / scale).to(dtype)
        return value.to(dtype)


def read_model_bin(path: str | Path) -> Ct2Model:
    """Read a CTranslate2 model.bin. Raises ModelError for anything that is not one."""
    path = Path(path)
    try:
        data = bytearray(path.read_bytes())
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
    cur = _Cursor(data, path)
    if len(data) < 8:
        raise ModelError(f"{path} is not a CTranslate2 model.bin (only {len(data)} bytes)")
    (version,) = cur.unpack("I")
    if not 1 <= version <= MAX_BINARY_VERSION:
        raise ModelError(f"{path} is not a CTranslate2 model.bin (binary version {version})")
    spec, revision = "", 1
    if version >= 2:
        spec = cur.string()
        (revision,) = cur.unpack("I")
    (n_vars,) = cur.unpack("I")
    variables: dict[str, torch.Tensor] = {}
    for _ in range(n_vars):
        name = cur.string()
        (rank,) = cur.unpack("B")
        shape = cur.unpack("I" * rank) if rank else ()
        if version >= 4:
            dtype_id, n_bytes = cur.unpack("BI")
            dtype = _DTYPES.get(dtype_id)
        else:
            item_size, n_items = cur.unpack("BI")
            dtype = _LEGACY_ITEM_SIZE.get(item_size)
            n_bytes = n_items * item_size
        if dtype is None:
            raise ModelError(f"{path}: variable {name!r} has an unknown dtype")
        start = cur.pos
        cur.take(n_bytes)
        count = n_bytes // torch.empty((), dtype=dtype).element_size()
        tensor = torch.frombuffer(data, dtype=dtype, count=count, offset=start) if count else torch.empty(0, dtype=dtype)
        variables[name] = tensor.reshape(shape)
    if version >= 3:
        (n_alias,) = cur.unpack("I")
        for _ in range(n_alias):
            alias, target = cur.string(), cur.string()
            if target in variables:
                variables[alias] = variables[target]
                if target + "_scale" in variables:
                    variables[alias + "_scale"] = variables[target + "_scale"]
    return Ct2Model(spec=spec, revision=revision, binary_version=version, variables=variables)


@dataclass(frozen=True)
class WhisperDims:
    """Whisper hyper-parameters, read from the weights (never from constants).

    Attributes:
        n_mels: mel bins (conv1 input channels): 80, or 128 for large-v3.
        n_audio_ctx: encoder positions (1500 for 30 s).
        n_audio_state: encoder width.
        n_audio_head: encoder attention heads.
        n_audio_layer: encoder layers.
        n_vocab: vocabulary size (embedding rows).
        n_text_ctx: decoder positions (448).
        n_text_state: decoder width.
        n_text_head: decoder attention heads.
        n_text_layer: decoder layers.
    """

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @classmethod
    def from_model(cls, model: Ct2Model) -> "WhisperDims":
        if model.spec and model.spec != "WhisperSpec":
            raise ModelError(f"model.bin holds a {model.spec}, not a Whisper model")
        needed = ("encoder/conv1/weight", "encoder/position_encodings/encodings", "decoder/embeddings/weight")
        missing = [n for n in needed if not model.has(n)]
        if missing:
            raise ModelError(f"model.bin is not a Whisper model (missing {missing[0]})")
        conv1 = model.raw("encoder/conv1/weight")  # (d, n_mels, 3)
        enc_pos = model.raw("encoder/position_encodings/encodings")  # (1500, d)
        emb = model.raw("decoder/embeddings/weight")  # (V, d)
        dec_pos = model.raw("decoder/position_encodings/encodings")  # (448, d)
        return cls(
            n_mels=int(conv1.shape[1]),
            n_audio_ctx=int(enc_pos.shape[0]),
            n_audio_state=int(enc_pos.shape[1]),
            n_audio_head=model.scalar("encoder/num_heads"),
            n_audio_layer=_count_layers(model, "encoder"),
            n_vocab=int(emb.shape[0]),
            n_text_ctx=int(dec_pos.shape[0]),
            n_text_state=int(emb.shape[1]),
            n_text_head=model.scalar("decoder/num_heads"),
            n_text_layer=_count_layers(model, "decoder"),
        )


def _count_layers(model: Ct2Model, scope: str) -> int:
    n = 0
    while any(name.startswith(f"{scope}/layer_{n}/") for name in model.variables):
        n += 1
    if n == 0:
        raise ModelError(f"model.bin has no {scope} layers (not a Whisper model?)")
    return n


def torch_state_dict(ct2: Ct2Model, dims: WhisperDims) -> dict[str, torch.Tensor]:
    """The float32 state dict of models/whisper.py's WhisperModel, from CTranslate2's variable names."""
    f = ct2.float
    sd: dict[str, torch.Tensor] = {}

    def linear(dst: str, src: str) -> None:
        sd[dst + ".weight"] = f(src + "/weight")
        sd[dst + ".bias"] = f(src + "/bias")

    def norm(dst: str, src: str) -> None:
        sd[dst + ".weight"] = f(src + "/gamma")
        sd[dst + ".bias"] = f(src + "/beta")

    linear("encoder.conv1", "encoder/conv1")
    linear("encoder.conv2", "encoder/conv2")
    sd["encoder.positional_embedding"] = f("encoder/position_encodings/encodings")
    for i in range(dims.n_audio_layer):
        p, s = f"encoder.layers.{i}.", f"encoder/layer_{i}/"
        norm(p + "attn_ln", s + "self_attention/layer_norm")
        linear(p + "qkv", s + "self_attention/linear_0")
        linear(p + "out", s + "self_attention/linear_1")
        norm(p + "mlp_ln", s + "ffn/layer_norm")
        linear(p + "mlp.fc1", s + "ffn/linear_0")
        linear(p + "mlp.fc2", s + "ffn/linear_1")
    norm("encoder.ln_post", "encoder/layer_norm")
    sd["decoder.token_embedding.weight"] = f("decoder/embeddings/weight")
    sd["decoder.positional_embedding"] = f("decoder/position_encodings/encodings")
    for i in range(dims.n_text_layer):
        p, s = f"decoder.layers.{i}.", f"decoder/layer_{i}/"
        norm(p + "attn_ln", s + "self_attention/layer_norm")
        linear(p + "qkv", s + "self_attention/linear_0")
        linear(p + "out", s + "self_attention/linear_1")
        norm(p + "cross_ln", s + "attention/layer_norm")
        linear(p + "cross_q", s + "attention/linear_0")
        linear(p + "cross_kv", s + "attention/linear_1")
        linear(p + "cross_out", s + "attention/linear_2")
        norm(p + "mlp_ln", s + "ffn/layer_norm")
        linear(p + "mlp.fc1", s + "ffn/linear_0")
        linear(p + "mlp.fc2", s + "ffn/linear_1")
    norm("decoder.ln", "decoder/layer_norm")
    return sd
