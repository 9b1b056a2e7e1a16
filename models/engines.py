"""One `Transcriber` protocol, two engines.

- ``spec``: our torch Whisper (models/whisper.py) with speculative decoding (models/speculative.py).
- ``ct2``: faster-whisper / CTranslate2 as it is; the baseline every benchmark compares against.

The pipeline and the server only ever see a Transcriber. It works window by window (<= 30 s):
encode once, then decode as often as needed (transcribe, translate, fallback temperatures) and
align words, all on the same encoder output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import numpy as np

from specscribe.models.types import DecodeRequest, EncodedAudio, Segment, WindowResult

EngineName = Literal["spec", "ct2"]
DraftName = Literal["auto", "none", "decoder", "ngram"]


@dataclass(frozen=True)
class EngineOptions:
    """How to load an engine.

    Attributes:
        engine: "spec" (torch, speculative) or "ct2" (faster-whisper baseline).
        model: a model name from `specscribe models list` or a path to a CTranslate2 Whisper folder.
        device: "auto", "cpu" or "cuda".
        compute_type: "auto", "float32", "bfloat16", "float16", "int8" or "int8_float32"
            (int8 encoder, float32 decoder: the CPU default without fast bf16; see models/compute.py).
        draft: drafter for the spec engine: auto (best available), none, decoder or ngram.
        draft_model: path to a draft checkpoint (safetensors); None uses the shipped default.
        threads: CPU threads for the engine; 0 lets the library choose.
    """

    engine: EngineName = "spec"
    model: str = "base"
    device: str = "auto"
    compute_type: str = "auto"
    draft: DraftName = "auto"
    draft_model: str | None = None
    threads: int = 0


class Transcriber(Protocol):
    """What the pipeline needs from an engine. One instance owns one loaded model."""

    name: str  # "spec" or "ct2"
    model_name: str  # the model's name or folder
    is_multilingual: bool

    def encode(self, audio: np.ndarray, window: float | None = None) -> EncodedAudio:
        """audio: float32 mono 16 kHz, shape (n,), n <= 30 s; shorter audio is padded to `window`
        seconds of encoder input (None: Whisper's full 30 s; see pipeline.audio.encoder_frames)."""
        ...

    def detect_language(self, encoded: EncodedAudio) -> tuple[str, float]:
        """Most likely language code and its probability."""
        ...

    def decode(self, encoded: EncodedAudio, request: DecodeRequest) -> WindowResult:
        """Decode one window. Detects the language first when request.language is None."""
        ...

    def align_words(
        self, encoded: EncodedAudio, result: WindowResult
    ) -> tuple[Segment, ...]:
        """result.segments with word timings filled in (window-relative seconds)."""
        ...

    def encode_text(self, text: str) -> tuple[int, ...]:
        """Token ids of text (for prompts), without special tokens."""
        ...

    def decode_tokens(self, tokens: Sequence[int]) -> str:
        """Text of token ids, special and timestamp tokens dropped."""
        ...


def load_transcriber(options: EngineOptions) -> Transcriber:
    """Load the engine named in options. Raises ModelError for a missing or broken model."""
    from specscribe.models.registry import resolve_model

    folder = resolve_model(options.model)
    if options.engine == "ct2":
        from specscribe.models.ct2_engine import Ct2Engine

        return Ct2Engine(folder, options)
    if options.engine == "spec":
        from specscribe.models.spec_engine import SpecEngine

        return SpecEngine(folder, options)
    raise ValueError(f"unknown engine {options.engine!r}; choose spec or ct2")
