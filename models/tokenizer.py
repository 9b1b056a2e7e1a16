"""Whisper's tokenizer: faster-whisper's ``Tokenizer`` over the folder's tokenizer.json.

Using faster-whisper's class (not a copy) keeps token ids, the non-speech set and text decoding
identical to the ct2 engine's. This wrapper adds what the spec engine needs around it: special
ids, language tokens, start sequences for any task/language.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Sequence

import tokenizers
from faster_whisper.tokenizer import _LANGUAGE_CODES, Tokenizer

from specscribe.models.errors import ModelError


class WhisperTokenizer:
    """Token ids and text for one model folder.

    Attributes:
        hf: the tokenizers.Tokenizer.
        multilingual: whether the model has language and task tokens.
        lang_ids: ids of the language tokens, in the model's order (config.json "lang_ids").
    """

    def __init__(self, hf: tokenizers.Tokenizer, multilingual: bool, lang_ids: Sequence[int] = ()):
        self.hf = hf
        self.multilingual = multilingual
        self.base = Tokenizer(hf, multilingual, task="transcribe", language="en")
        if multilingual and not lang_ids:
            found = (hf.token_to_id(f"<|{code}|>") for code in _LANGUAGE_CODES)
            lang_ids = tuple(i for i in found if i is not None)
        self.lang_ids = tuple(int(i) for i in lang_ids)
        b = self.base
        self.sot, self.eot, self.sot_prev = b.sot, b.eot, b.sot_prev
        self.no_timestamps, self.timestamp_begin, self.no_speech = b.no_timestamps, b.timestamp_begin, b.no_speech

    @classmethod
    def from_folder(cls, folder: Path, multilingual: bool) -> "WhisperTokenizer":
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ModelError(f"{folder} has no tokenizer.json (the spec engine needs it)")
        try:
            hf = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for bad JSON
            raise ModelError(f"{path} is unreadable ({exc})") from None
        lang_ids: list[int] = []
        try:
            lang_ids = json.loads((folder / "config.json").read_text()).get("lang_ids", [])
        except (OSError, ValueError):
            pass
        return cls(hf, multilingual, lang_ids if multilingual else ())

    @cached_property
    def language_codes(self) -> tuple[str, ...]:
        """Language codes in lang_ids order."""
        return tuple(self.hf.id_to_token(i)[2:-2] for i in self.lang_ids)

    def for_task(self, task: str, language: str | None) -> Tokenizer:
        """faster-whisper's Tokenizer for this task and language (English-only: neither)."""
        if not self.multilingual:
            return self.base
        if language not in self.language_codes:
            raise ValueError(f"unknown language {language!r} for this model")
        return Tokenizer(self.hf, True, task=task, language=language)

    def sot_sequence(self, task: str, language: str | None) -> list[int]:
        return list(self.for_task(task, language).sot_sequence)

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        return tuple(self.base.non_speech_tokens)

    def encode(self, text: str) -> list[int]:
        return self.base.encode(text)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the tokens; special and timestamp tokens dropped."""
        return self.base.decode([t for t in tokens if t < self.eot])
