"""One `Transcriber` protocol, two engines.

- ``spec``: our torch Whisper (models/whisper.py) with speculative decoding (models/speculative.py).
- ``ct2``: faster-whisper / CTranslate2 as it is; the baseline every benchmark compares against.

The pipeline and the server only ever see a Transcriber. It works window by window (<= 30 s):
encode once, then decode as often as needed (transcribe, translate, fallback temperatures) and
align words, all on the same encoder output.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Hashable, Literal, Protocol, Sequence

import numpy as np

from specscribe.models.types import DecodeRequest, EncodedAudio, Segment, WindowResult

EngineName = Literal["spec", "ct2"]
DraftName = Literal["auto", "none", "decoder", "ngram"]
DraftPolicyName = Literal["measured", "fixed"]


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
        pass_rows: rows per block of a batch-invariant target pass (models/invariant.py);
            0 picks by compute type and device (models/compute.py pass_rows_for).
        query_block: attention query rows per call of such a pass (PassShape.query_block); 0 picks
            by compute type and device (models/compute.py query_block_for).
        row_calls: "auto": a pass's row-wise work in whole calls where a probe finds this CPU's kernels give
            a row the same bits at any multiple of pass_rows rows (PassShape.whole), else in blocks; "blocks":
            always blocks.
        adapt_draft: train the draft online on the target's outputs, in idle time (models/adapt.py).
        adapt_save: where an adapted draft state is written each time one is swapped in.
        draft_policy: with draft auto, "measured" picks each decode's drafter by measured speed (a
            bandit, models/draft_policy.py); "fixed" by the fixed rule (draft_policy.fixed_arm).
    """

    engine: EngineName = "spec"
    model: str = "base"
    device: str = "auto"
    compute_type: str = "auto"
    draft: DraftName = "auto"
    draft_model: str | None = None
    threads: int = 0
    pass_rows: int = 0
    query_block: int = 0
    row_calls: str = "auto"
    adapt_draft: bool = False
    adapt_save: str | None = None
    draft_policy: DraftPolicyName = "measured"


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

    def language_probabilities(self, encoded: EncodedAudio, top: int = 10) -> dict[str, float]:
        """The ``top`` most likely language codes with their probabilities, most likely first."""
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

    def decode_loop(self) -> "DecodeLoop":
        """A loop that decodes many submitted windows together (see DecodeLoop)."""
        ...


class DecodeLoop(Protocol):
    """Decodes that share the model: submit any time, step until they come back.

    ``decode`` of a window equals its result from a loop, whatever else the loop decodes (the
    spec engine's passes are batch-invariant: models/invariant.py). Tags are the caller's.
    """

    def submit(self, tag: Hashable, encoded: EncodedAudio, request: DecodeRequest) -> None:
        """Queue a decode; it joins the next step."""
        ...

    def step(self) -> list[tuple[Hashable, WindowResult | Exception]]:
        """Advance every decode; return those that finished. A decode that failed on its own comes back as its
        exception, which the caller throws into that decode's program (its file or job fails, the rest go on);
        an exception raised by step itself is the engine's, for every decode in flight."""
        ...

    def cancel(self, tag: Hashable) -> None:
        """Forget a decode (its result never comes back)."""
        ...

    def __len__(self) -> int:
        """Decodes submitted and not yet returned or cancelled."""
        ...


class SequentialDecodeLoop:
    """A DecodeLoop for engines without batched decoding (ct2): each step decodes one window."""

    def __init__(self, transcriber: Transcriber):
        self.transcriber = transcriber
        self._queue: collections.OrderedDict[Hashable, tuple[EncodedAudio, DecodeRequest]] = collections.OrderedDict()

    def submit(self, tag: Hashable, encoded: EncodedAudio, request: DecodeRequest) -> None:
        if tag in self._queue:
            raise ValueError(f"a decode tagged {tag!r} is already queued")
        self._queue[tag] = (encoded, request)

    def step(self) -> list[tuple[Hashable, WindowResult | Exception]]:
        if not self._queue:
            return []
        tag, (encoded, request) = self._queue.popitem(last=False)
        try:
            return [(tag, self.transcriber.decode(encoded, request))]
        except Exception as exc:  # one window's decode alone
            return [(tag, exc)]

    def cancel(self, tag: Hashable) -> None:
        self._queue.pop(tag, None)

    def __len__(self) -> int:
        return len(self._queue)


def load_transcriber(options: EngineOptions) -> Transcriber:
    """Load the engine named in options. Raises ModelError for a missing or broken model."""
    from specscribe.models.registry import resolve_model

    folder = resolve_model(options.model)
    if options.adapt_draft and options.engine != "spec":
        from specscribe.models.errors import ModelError

        raise ModelError("--adapt-draft needs the spec engine (the ct2 engine has no draft)")
    if options.engine == "ct2":
        from specscribe.models.ct2_engine import Ct2Engine

        return Ct2Engine(folder, options)
    if options.engine == "spec":
        from specscribe.models.spec_engine import SpecEngine

        return SpecEngine(folder, options)
    raise ValueError(f"unknown engine {options.engine!r}; choose spec or ct2")
