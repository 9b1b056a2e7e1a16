"""Continuous batching over a SpecEngine: the decode loop that models/engines.py's DecodeLoop names.

``SpecDecodeLoop.submit`` asks the engine to start a decode (``SpecEngine.start_decode``: prompt,
rules, drafter, its ``DecodeJob``), the decode joins the loop's BatchDecoder (models/batch_decode.py),
and ``step`` runs one shared target pass and hands every finished decode to ``finish_decode``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Hashable, Sequence

from specscribe.models.batch_decode import BatchDecoder, Decoding
from specscribe.models.draft_policy import Choice
from specscribe.models.types import DecodeRequest, EncodedAudio, WindowResult

if TYPE_CHECKING:
    from specscribe.models.decoding import GenerateOptions
    from specscribe.models.spec_engine import SpecEngine


@dataclass(frozen=True)
class DecodeJob:
    """One submitted decode: its sequence (or hypothesis group) and what its WindowResult needs."""

    sequence: Decoding
    options: "GenerateOptions"
    duration: float
    language: str
    language_probability: float
    temperature: float
    learn: Callable[[Sequence[int]], None] | None = None  # --adapt-draft: hands the tokens to the adapter
    choice: Choice | None = None  # the drafting policy's arm for this decode (models/draft_policy.py)


class SpecDecodeLoop:
    """Continuous batching over a SpecEngine (the DecodeLoop of models/engines.py): submitted
    decodes join the next target pass, finished ones come back from ``step``."""

    def __init__(self, engine: "SpecEngine"):
        shape = engine.model.decoder.pass_shape
        self.engine = engine
        self.batch: BatchDecoder = BatchDecoder(block=shape.rows if shape is not None else 1)
        self._jobs: dict[Hashable, DecodeJob] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def submit(self, tag: Hashable, encoded: EncodedAudio, request: DecodeRequest) -> None:
        job = self.engine.start_decode(encoded, request, shared=len(self._jobs) > 0)
        self.batch.add(tag, job.sequence)
        self._jobs[tag] = job

    def step(self) -> list[tuple[Hashable, WindowResult]]:
        started = time.perf_counter()
        out = [(tag, self.engine.finish_decode(self._jobs.pop(tag), res)) for tag, res in self.batch.step()]
        times = self.engine.times
        times.decode_total += (time.perf_counter() - started) * 1000
        times.n_decodes += len(out)
        return out

    def cancel(self, tag: Hashable) -> None:
        self.batch.cancel(tag)
        job = self._jobs.pop(tag, None)
        if job is not None and job.choice is not None:
            self.engine.policy.done(job.choice, None)
