"""Whisper's encoder in CTranslate2 at int8, feeding the torch decoder (the int8 compute types).

On CPU, CTranslate2's int8 encoder is the fastest one we have without AMX: a 30 s window of base
takes 0.45-0.55 s against 0.65-0.75 s for the torch bf16 encoder and 1.0 s for torch's dynamic
int8, on a 2-core Xeon with AVX512-BF16 (docs/benchmarks.md). It takes windows shorter than 30 s
too (streaming's buffer + pad). Its output is float32; the decoder's cross-attention K/V convert
it to the decoder's dtype. Only the encoder of the loaded model is used.

    encoder = Ct2Encoder(folder, threads=0)
    enc = encoder(mel)          # mel (n_mels, frames) float32 -> (1, frames // 2, d) float32
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specscribe.models.errors import ModelError


class Ct2Encoder:
    """One loaded CTranslate2 Whisper model (CPU, int8), used for its encoder only."""

    def __init__(self, folder: Path, threads: int = 0):
        import ctranslate2

        try:
            self.model = ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="int8", intra_threads=threads)
        except (RuntimeError, ValueError) as exc:
            raise ModelError(f"CTranslate2 cannot load {folder} for its int8 encoder ({exc})") from None

    def __call__(self, mel: np.ndarray) -> torch.Tensor:
        """mel (n_mels, frames) float32 -> encoder output (1, frames // 2, d) float32."""
        import ctranslate2

        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None], dtype=np.float32))
        return torch.from_numpy(np.array(self.model.encode(features)))
