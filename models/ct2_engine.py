"""The `ct2` engine: faster-whisper / CTranslate2 as it is, behind the Transcriber protocol.

It is the baseline every benchmark compares against, and the fallback for users without torch.
No speculation: its SpecStats count emitted tokens and nothing else. Beam search, best-of sampling
and n-best are CTranslate2's own (``generate``'s beam_size, patience, length_penalty, num_hypotheses).
Features, prompt, suppression and word alignment follow faster-whisper 1.2.1's own code paths
(``WhisperModel.get_prompt``, ``generate_with_fallback``'s generate call, ``add_word_timestamps``),
so a window decoded here gives the tokens faster-whisper gives for the same window.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from specscribe.models.engines import EngineOptions, SequentialDecodeLoop
from specscribe.models.errors import ModelError
from specscribe.models.types import Alternative, DecodeRequest, EncodedAudio, Segment, SpecStats, WindowResult, Word
from specscribe.pipeline.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, TIME_PRECISION, encoder_frames

log = logging.getLogger(__name__)

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
MAX_LENGTH = 448  # the decoder's positional table


def ct2_max_length(max_new_tokens: int, prompt_len: int) -> int:
    """CTranslate2's max_length for a cap of max_new_tokens generated tokens after a prompt.

    CTranslate2 caps Whisper generation at min(max_length // 2, max_length - prompt_len + 1)
    (faster-whisper passes 448). 2 * N gives N, unless the prompt is longer than N + 1 (a long
    streaming prompt before a short window): then N + prompt_len - 1 gives N, where 2 * N would
    give nothing at all ("The maximum decoding length must be > 0"). At most 448.
    """
    n = max(1, max_new_tokens)
    return min(MAX_LENGTH, max(2 * n, n + prompt_len - 1))


@dataclass(frozen=True)
class _Ct2Encoding:
    """Engine-private part of EncodedAudio.

    Attributes:
        output: CTranslate2 StorageView, encoder output (1, 1500, d).
        num_frames: mel frames of real audio in the window (<= 3000).
    """

    output: Any
    num_frames: int


def _cpu_compute_type(compute_type: str, device: str) -> str:
    if compute_type != "auto":
        return compute_type
    return "int8" if device == "cpu" else "float16"


class Ct2Engine:
    """faster-whisper's WhisperModel, one window at a time."""

    name = "ct2"

    def __init__(self, folder: Path, options: EngineOptions) -> None:
        import ctranslate2
        from faster_whisper import WhisperModel

        device = options.device
        if device == "auto":
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        self.device = device
        self.compute_type = _cpu_compute_type(options.compute_type, device)
        try:
            self._fw = WhisperModel(
                str(folder), device=device, compute_type=self.compute_type, cpu_threads=options.threads
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise ModelError(f"cannot load {folder} with faster-whisper ({exc})") from None
        threadpool_limits(1, user_api="blas")  # numpy's spinning BLAS threads slow CTranslate2's (compute.set_threads)
        self._ct2 = self._fw.model
        if self._fw.feature_extractor.mel_filters.shape[0] != self._ct2.n_mels:
            # faster-whisper sizes its features from preprocessor_config.json, 80 mels without one: a large-v3
            # folder converted without that file (128 mels) then fails every encode
            from faster_whisper.feature_extractor import FeatureExtractor

            self._fw.feature_extractor = FeatureExtractor(feature_size=self._ct2.n_mels)
        self.model_name = str(options.model)
        self.is_multilingual = bool(self._ct2.is_multilingual)
        self._tokenizers: dict[tuple[str, str], Any] = {}

    # --- helpers -------------------------------------------------------------------------
    def _tokenizer(self, task: str, language: str):
        from faster_whisper.tokenizer import Tokenizer

        key = (task, language)
        if key not in self._tokenizers:
            self._tokenizers[key] = Tokenizer(
                self._fw.hf_tokenizer, self.is_multilingual, task=task, language=language
            )
        return self._tokenizers[key]

    # --- Transcriber ---------------------------------------------------------------------
    def encode(self, audio: np.ndarray, window: float | None = None) -> EncodedAudio:
        from faster_whisper.audio import pad_or_trim

        audio = np.asarray(audio, dtype=np.float32)
        duration = min(len(audio), N_FRAMES * HOP_LENGTH) / SAMPLE_RATE
        features = self._fw.feature_extractor(audio[: N_FRAMES * HOP_LENGTH])  # (n_mels, frames + 1)
        num_frames = min(features.shape[-1] - 1, N_FRAMES)
        frames = encoder_frames(window, duration)
        features = np.ascontiguousarray(pad_or_trim(features[:, :num_frames])[:, :frames])  # (n_mels, frames)
        output = self._fw.encode(features)  # (1, frames // 2, d)
        return EncodedAudio(duration=duration, handle=_Ct2Encoding(output, num_frames))

    def detect_language(self, encoded: EncodedAudio) -> tuple[str, float]:
        code, prob = next(iter(self.language_probabilities(encoded, top=1).items()))
        return code, prob

    def language_probabilities(self, encoded: EncodedAudio, top: int = 10) -> dict[str, float]:
        if not self.is_multilingual:
            return {"en": 1.0}
        ranked = self._ct2.detect_language(encoded.handle.output)[0]  # [(token, prob)], most likely first
        return {token[2:-2]: float(prob) for token, prob in ranked[:top]}

    def decode(self, encoded: EncodedAudio, request: DecodeRequest) -> WindowResult:
        from faster_whisper.transcribe import get_suppressed_tokens

        language, language_probability = request.language, 1.0
        if not self.is_multilingual:
            language = "en"
        elif language is None:
            language, language_probability = self.detect_language(encoded)
        tokenizer = self._tokenizer(request.task, language)
        previous, hotwords = list(request.prompt_tokens), request.hotwords.strip()
        if hotwords:  # hotwords and history share Whisper's cap, as the spec engine's (decoding.build_prompt)
            room = MAX_LENGTH // 2 - 1 - min(len(tokenizer.encode(" " + hotwords)), MAX_LENGTH // 2 - 1)
            previous = previous[-room:] if room else []
        prompt = self._fw.get_prompt(
            tokenizer, previous, without_timestamps=not request.timestamps, hotwords=hotwords or None,
        )
        max_length = ct2_max_length(request.max_new_tokens, len(prompt))
        if request.temperature > 0:  # faster-whisper's sampled fallback: best_of samples, the best kept
            import ctranslate2

            if request.seed is not None:
                ctranslate2.set_random_seed(request.seed)
            search = {"beam_size": 1, "num_hypotheses": max(request.best_of, request.n_best),
                      "sampling_topk": 0, "sampling_temperature": request.temperature}
        else:
            search = {"beam_size": request.beam_size, "patience": request.patience, "num_hypotheses": request.n_best}
        suppress = get_suppressed_tokens(tokenizer, list(request.suppress_tokens))
        started = time.perf_counter()
        result = self._ct2.generate(
            encoded.handle.output,
            [prompt],
            length_penalty=request.length_penalty,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=request.suppress_blank,
            suppress_tokens=list(suppress),
            max_initial_timestamp_index=int(round(request.max_initial_timestamp / TIME_PRECISION)),
            **search,
        )[0]
        elapsed_ms = (time.perf_counter() - started) * 1000
        ranked = []  # (tokens with timestamps, avg_logprob) per hypothesis, best first
        for ids, score in zip(result.sequences_ids, result.scores):
            toks = [t for t in ids if t != tokenizer.eot]
            # faster-whisper's: the score is log-prob / length ** length_penalty
            ranked.append((toks, float(score * len(toks) ** request.length_penalty / (len(toks) + 1))))
        tokens, avg_logprob = ranked[0]
        alternatives = []
        for toks, avg in ranked[: request.n_best] if request.n_best > 1 else ():
            text = tuple(t for t in toks if t < tokenizer.eot)  # timestamps dropped
            alternatives.append(Alternative(tokenizer.decode(list(text)), text, avg))
        segments = split_segments(tokens, tokenizer, encoded.duration, self.decode_tokens)
        return WindowResult(
            tokens=tuple(tokens),
            text=tokenizer.decode(tokens),
            segments=segments,
            language=language,
            language_probability=language_probability,
            avg_logprob=float(avg_logprob),
            no_speech_prob=float(result.no_speech_prob),
            temperature=request.temperature,
            stats=SpecStats(tokens=len(tokens) + 1, verify_ms=elapsed_ms),
            alternatives=tuple(alternatives),
        )

    def align_words(self, encoded: EncodedAudio, result: WindowResult) -> tuple[Segment, ...]:
        segments = [s for s in result.segments if s.tokens]
        if not segments:
            return result.segments
        tokenizer = self._tokenizer("transcribe", result.language)
        dicts = [
            {"seek": 0, "start": s.start, "end": s.end, "tokens": list(s.tokens)} for s in segments
        ]
        self._fw.add_word_timestamps(
            [dicts],
            tokenizer,
            encoded.handle.output,
            encoded.handle.num_frames,
            PREPEND_PUNCTUATIONS,
            APPEND_PUNCTUATIONS,
            last_speech_timestamp=0.0,
        )
        aligned = iter(dicts)
        out = []
        for seg in result.segments:
            if not seg.tokens:
                out.append(seg)
                continue
            d = next(aligned)
            words = tuple(
                Word(float(w["start"]), float(w["end"]), w["word"], float(w["probability"]))
                for w in d.get("words", ())
            )
            out.append(dataclasses.replace(seg, start=float(d["start"]), end=float(d["end"]), words=words))
        return tuple(out)

    def encode_text(self, text: str) -> tuple[int, ...]:
        return tuple(self._fw.hf_tokenizer.encode(text, add_special_tokens=False).ids)

    def decode_tokens(self, tokens: Sequence[int]) -> str:
        eot = self._fw.hf_tokenizer.token_to_id("<|endoftext|>")
        return self._fw.hf_tokenizer.decode([t for t in tokens if t < eot])

    def decode_loop(self) -> SequentialDecodeLoop:
        """One window per step: the baseline decodes as faster-whisper's sequential path does."""
        return SequentialDecodeLoop(self)


def split_segments(tokens: Sequence[int], tokenizer, duration: float, decode) -> tuple[Segment, ...]:
    """Cut generated tokens into segments at timestamp tokens (window-relative seconds).

    A pair of consecutive timestamps closes one segment and opens the next (Whisper's format
    ``<|t0|> text <|t1|><|t1|> text <|t2|>``). Unlike faster-whisper's seek loop, which drops
    an unfinished last segment and decodes it again from its start, each window here is
    decoded once, so trailing text without a closing timestamp becomes a segment ending at
    the window's end. Without timestamps the whole window is one segment.
    """
    ts_begin = tokenizer.timestamp_begin
    eot = tokenizer.eot
    out: list[Segment] = []

    def add(start: float, end: float, toks: list[int]) -> None:
        text_tokens = [t for t in toks if t < eot]
        text = decode(text_tokens)
        if text_tokens and text.strip():
            start = max(0.0, min(start, duration))
            end = max(start, min(end, duration))
            out.append(Segment(round(start, 3), round(end, 3), text, tuple(text_tokens)))

    if not any(t >= ts_begin for t in tokens):
        add(0.0, duration, list(tokens))
        return tuple(out)
    start: float | None = None
    current: list[int] = []
    for tok in tokens:
        if tok >= ts_begin:
            t = (tok - ts_begin) * TIME_PRECISION
            if start is None:
                start = t
            elif current:
                add(start, t, current)
                current, start = [], None
            else:
                start = t  # consecutive timestamps: the second opens the next segment
        else:
            if start is None:
                start = out[-1].end if out else 0.0
            current.append(tok)
    if current:
        add(start if start is not None else 0.0, duration, current)
    return tuple(out)
