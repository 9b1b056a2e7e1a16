"""The `spec` engine: our torch Whisper (models/whisper.py) behind the Transcriber protocol.

Features and tokens come from faster-whisper's own FeatureExtractor and Tokenizer, so a window
gives the same input as in the ct2 engine. Decoding is target-only greedy (or sampling) through
``SpecEngine._generate``, the one place the speculative loop plugs into.

    engine = load_transcriber(EngineOptions(engine="spec", model="base"))
    enc = engine.encode(audio)                       # float32 16 kHz, <= 30 s
    result = engine.decode(enc, DecodeRequest(language=None, timestamps=True))
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from specscribe.models.compute import (
    pack_decoder,
    pack_encoder,
    pass_rows_for,
    query_block_for,
    resolve_compute_type,
    resolve_device,
    set_threads,
)
from specscribe.models.alignment import align_words
from specscribe.models.beam import BeamOptions, BeamSequence, SampleGroup
from specscribe.models.decode_loop import DecodeJob, SpecDecodeLoop
from specscribe.models.decoding import GenerateOptions, build_prompt, detect_language, max_new_tokens
from specscribe.models.draft import draft_group
from specscribe.models.draft_loading import load_draft_decoder
from specscribe.models.draft_policy import (
    DraftPolicy,
    PolicyContext,
    auto_arms,
    fixed_arm,
    make_drafter,
)
from specscribe.models.engines import EngineOptions
from specscribe.models.errors import ModelError
from specscribe.models.invariant import PassShape
from specscribe.models.kv_cache import CrossKVCache
from specscribe.models.logits import RuleConfig, WhisperLogitRules, suppressed_token_ids
from specscribe.models.speculative import SpecOptions, SpecResult, to_generation, window_sequence, window_spec_options
from specscribe.models.tokenizer import WhisperTokenizer
from specscribe.models.types import Alternative, DecodeRequest, EncodedAudio, Segment, WindowResult
from specscribe.models.whisper import DecoderSession, WhisperModel
from specscribe.pipeline.audio import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, TIME_PRECISION, encoder_frames

HYPOTHESIS_K = 32  # most drafted tokens per pass when re-decoding with a previous hypothesis


def hypothesis_spec_options(eot: int, hypothesis: Sequence[int], compute_type: str) -> SpecOptions:
    """A re-decode's speculation settings: the previous hypothesis is nearly free and mostly right,
    so verify long runs of it per pass (scripts/bench_speculative.py measures with these too).

    How k adapts (``k_steps``) depends on what a row of a pass costs. In float32 and int8 on CPU a
    rejected row costs about a tenth of a one-row pass, so k halves after a rejection and doubles after
    a full acceptance: replaying 152 re-decodes of two live conversations on an AVX2 EPYC, that drafted
    19 % fewer rows for 6 % more passes and decoded the same tokens 1.06x as fast, wall and CPU time
    (median of 6 interleaved rounds, scripts/bench_redecode.py; a first run of 4 rounds, without CPU
    time, gave 0.91x, two of its rounds 5-7 s apart). In bf16 and fp16, where a pass of 16 rows costs
    what one row does, the extra passes would cost more than the rows save: k steps by -1 / +2."""
    k_steps = "additive" if compute_type in ("bfloat16", "float16") else "multiplicative"
    return SpecOptions(eot=eot, k_init=min(HYPOTHESIS_K, len(hypothesis) + 1), k_max=HYPOTHESIS_K, k_steps=k_steps)


@dataclass
class StageTimes:
    """Milliseconds spent per stage since the engine was created (for benchmarks).

    Attributes:
        features: log-mel features.
        encoder: the audio encoder.
        cross_kv: cross-attention K/V, once per window.
        language: language detection passes.
        decode_total: whole decode() calls (prompt, steps, rules, overhead).
        n_decodes: decode() calls.
    """

    features: float = 0.0
    encoder: float = 0.0
    cross_kv: float = 0.0
    language: float = 0.0
    decode_total: float = 0.0
    n_decodes: int = 0


class SpecEngine:
    """Torch Whisper; one instance owns one loaded model."""

    name = "spec"

    def __init__(self, folder: Path, options: EngineOptions):
        if options.draft_policy not in ("measured", "fixed"):
            raise ValueError(f"unknown draft policy {options.draft_policy!r}; choose measured or fixed")
        if options.row_calls not in ("auto", "blocks"):
            raise ValueError(f"unknown row calls {options.row_calls!r}; choose auto or blocks")
        folder = Path(folder)
        bin_path = folder / "model.bin"
        if not bin_path.is_file():
            raise ModelError(f"{folder} is not a CTranslate2 Whisper model (no model.bin)")
        from specscribe.models.weight_cache import load_whisper_model

        try:  # the user's --device / --compute-type on this machine: a one-line error, not a traceback
            self.device = resolve_device(options.device)
            self.compute_type = resolve_compute_type(options.compute_type, self.device)
        except ValueError as exc:
            raise ModelError(str(exc)) from None
        set_threads(options.threads)
        # converted once per (model, dtype) into specscribe_home()/cache, then memory-mapped
        model, self.dims = load_whisper_model(folder, self.compute_type, self.device, str(options.model))
        self.model: WhisperModel = model  # already through prepare_model
        # every target pass runs at fixed shapes, so batching and drafting never change a row's bits
        # (row-wise work in whole calls where a probe finds this CPU's kernels keep a row's bits at any multiple
        # of the block: None = probe at first need; CUDA's libraries pick kernels by shape, so blocks there)
        shape = PassShape(rows=options.pass_rows or pass_rows_for(self.compute_type, self.device),
                          query_block=options.query_block or query_block_for(self.compute_type, self.device),
                          whole=None if options.row_calls == "auto" and self.device == "cpu" else False)
        self.model.decoder.pass_shape = shape
        pack_decoder(self.model.decoder, shape.rows)  # prepacked weights for blocks of shape.rows
        pack_encoder(self.model.encoder, self.dims.n_audio_ctx)  # prepacked, gelu fused (30 s windows)
        self.model_name = str(options.model)
        self.is_multilingual = self.dims.n_vocab >= 51865
        self.tokenizer = WhisperTokenizer.from_folder(folder, self.is_multilingual)
        config = _read_config(folder)
        eot = self.tokenizer.eot
        begin = config.get("suppress_ids_begin") or [*self.tokenizer.encode(" ")[:1], eot]
        self._suppress_begin = tuple(int(i) for i in begin)
        from faster_whisper.feature_extractor import FeatureExtractor

        self._features = FeatureExtractor(feature_size=self.dims.n_mels)
        self.times = StageTimes()
        self._cross = CrossKVCache()  # cross K/V per window in use
        # speculative decoding (models/speculative.py) and word alignment (models/alignment.py)
        self.draft_kind = options.draft
        self._alignment_heads = config.get("alignment_heads") or [
            [layer, head] for layer in range(self.dims.n_text_layer // 2, self.dims.n_text_layer)
            for head in range(self.dims.n_text_head)
        ]  # openai/whisper's default: every head of the second half of the layers
        self.draft = None
        # `auto` and `decoder` load --draft-model, else the checkpoint shipped for this model
        # (docs/draft_model.md). `auto` skips a shipped checkpoint made for another target (which
        # decodes draft with it is the drafting policy's call: models/draft_policy.py); a named
        # --draft-model for another target fails here (ModelError).
        if options.draft in ("auto", "decoder"):
            self.draft = load_draft_decoder(
                self.model.decoder, folder, self.model_name, options.draft_model, self.compute_type,
                untrained_ok=options.draft == "decoder", mismatch_ok=options.draft == "auto" and not options.draft_model,
            )
        # --draft auto with --draft-policy measured: each decode's drafter chosen by measured speed
        self.policy = DraftPolicy() if options.draft == "auto" and options.draft_policy == "measured" else None
        # --adapt-draft: the draft keeps learning from this engine's outputs in idle time
        self.adapter = self._adapter(options) if options.adapt_draft else None

    def _adapter(self, options: EngineOptions):
        from specscribe.models.adapt import AdaptOptions, DraftAdapter, served_draft

        if self.draft is None or self.draft.checkpoint is None:  # none loaded, or untrained copies
            raise ModelError("--adapt-draft needs a trained draft for this model (the shipped one, or "
                             "--draft-model PATH) and --draft auto or decoder")

        def install(net) -> None:  # decodes in flight keep the draft they started with
            self.draft = served_draft(net, self.model.decoder, self.draft, self.compute_type)

        return DraftAdapter(
            self.model.decoder, self.draft.checkpoint, self.draft.target_sha256, self.tokenizer.eot,
            lambda enc: self.session(EncodedAudio(duration=0.0, handle=enc)), install,
            AdaptOptions(save=options.adapt_save), device=self.device,
        )

    # --- helpers -----------------------------------------------------------------------
    def features(self, audio: np.ndarray) -> np.ndarray:
        """audio (n,) -> log-mel (n_mels, 3000), as faster-whisper builds one window."""
        from faster_whisper.audio import pad_or_trim

        features = self._features(audio[: N_FRAMES * HOP_LENGTH])  # (n_mels, frames + 1)
        num_frames = min(features.shape[-1] - 1, N_FRAMES)
        return pad_or_trim(features[:, :num_frames])

    def session(self, encoded: EncodedAudio) -> DecoderSession:
        """A fresh target decoder session over the window; its cross K/V computed once per window
        (decode, language detection and word alignment share them)."""
        started = time.perf_counter()
        enc = encoded.handle
        cross, computed = self._cross.get(enc, lambda: self.model.decoder.cross_keys_values(enc))
        if computed:
            self.times.cross_kv += (time.perf_counter() - started) * 1000
        return DecoderSession(self.model.decoder, enc, cross=cross)

    def rules(self, request: DecodeRequest) -> WhisperLogitRules:
        tok = self.tokenizer
        specials = [tok.base.transcribe, tok.base.translate, tok.sot, tok.sot_prev, tok.base.sot_lm, tok.no_speech]
        suppress = suppressed_token_ids(
            request.suppress_tokens, tok.non_speech_tokens, [s for s in specials if s is not None]
        )
        return WhisperLogitRules(
            RuleConfig(
                n_vocab=self.dims.n_vocab,
                eot=tok.eot,
                no_timestamps=tok.no_timestamps,
                suppress=suppress,
                suppress_begin=self._suppress_begin if request.suppress_blank else (),
                timestamps=request.timestamps,
                max_initial_timestamp_index=int(round(request.max_initial_timestamp / TIME_PRECISION)),
            )
        )

    def prompt(self, request: DecodeRequest, language: str) -> list[int]:
        tok = self.tokenizer
        hotwords = tok.encode(" " + request.hotwords.strip()) if request.hotwords.strip() else ()
        return build_prompt(
            tok.sot_sequence(request.task, language),
            request.prompt_tokens,
            tok.sot_prev,
            tok.no_timestamps,
            request.timestamps,
            self.dims.n_text_ctx,
            hotwords,
        )

    # --- Transcriber -------------------------------------------------------------------
    def encode(self, audio: np.ndarray, window: float | None = None) -> EncodedAudio:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        duration = min(len(audio), N_FRAMES * HOP_LENGTH) / SAMPLE_RATE
        started = time.perf_counter()
        frames = encoder_frames(window, duration)
        mel = self.features(audio)[:, :frames]  # (n_mels, frames)
        mid = time.perf_counter()
        enc = self.model.encode(torch.from_numpy(mel).unsqueeze(0).to(self.device))  # (1, frames // 2, d)
        self.times.features += (mid - started) * 1000
        self.times.encoder += (time.perf_counter() - mid) * 1000
        return EncodedAudio(duration=duration, handle=enc)

    def detect_language(self, encoded: EncodedAudio) -> tuple[str, float]:
        code, prob = next(iter(self.language_probabilities(encoded, top=1).items()))
        return code, prob

    def language_probabilities(self, encoded: EncodedAudio, top: int = 10) -> dict[str, float]:
        if not self.is_multilingual:
            return {"en": 1.0}
        started = time.perf_counter()
        tok = self.tokenizer
        ranked = detect_language(self.session(encoded), tok.sot, tok.lang_ids)
        self.times.language += (time.perf_counter() - started) * 1000
        return {tok.hf.id_to_token(token_id)[2:-2]: prob for token_id, prob in ranked[:top]}

    def decode(self, encoded: EncodedAudio, request: DecodeRequest) -> WindowResult:
        return self.decode_many([(encoded, request)])[0]

    def decode_many(self, items: Sequence[tuple[EncodedAudio, DecodeRequest]]) -> list[WindowResult]:
        """Decode several (window, request) pairs together, sharing every target pass."""
        loop = self.decode_loop()
        for i, (encoded, request) in enumerate(items):
            loop.submit(i, encoded, request)
        results: dict[int, WindowResult] = {}
        while len(loop):
            results.update(loop.step())
        return [results[i] for i in range(len(items))]

    def decode_loop(self) -> SpecDecodeLoop:
        """A continuous-batching loop over this engine (models/engines.py DecodeLoop)."""
        return SpecDecodeLoop(self)

    def start_decode(self, encoded: EncodedAudio, request: DecodeRequest, shared: bool = False) -> DecodeJob:
        """Everything one decode needs, its SpecSequence ready to join a batch (the language is
        detected here, in a pass of its own, when the request leaves it open). shared: other
        decodes are in the pass it joins (the drafting policy's context)."""
        language, language_probability = request.language, 1.0
        if not self.is_multilingual:
            language = "en"
        elif language is None:
            language, language_probability = self.detect_language(encoded)
        tok = self.tokenizer
        prompt = self.prompt(request, language)
        options = GenerateOptions(
            max_new_tokens=max_new_tokens(len(prompt), request.max_new_tokens, self.dims.n_text_ctx),
            eot=tok.eot,
            sot_index=prompt.index(tok.sot),
            no_speech=tok.no_speech if tok.no_speech is not None else -1,
            temperature=request.temperature,
            seed=request.seed,
        )
        rules, session = self.rules(request), self.session(encoded)
        if (request.beam_size > 1 and request.temperature == 0) or (request.best_of > 1 and request.temperature > 0):
            group = self._hypothesis_group(session, prompt, rules, options, request)
            return DecodeJob(group, options, encoded.duration, language, language_probability, request.temperature)
        # Temperature-fallback decodes run without drafts: with drafts, how much of the seeded random
        # stream a decode consumes depends on the timing-driven draft length, so the same seed could
        # give a different (equally likely) text on every run. Plain sampling is reproducible.
        drafter, choice = None, None
        if request.temperature == 0:
            hypothesis = request.hypothesis_tokens
            arm = fixed_arm(self.draft_kind, hypothesis, self.draft, language, request.task)
            if self.policy is not None:
                context = PolicyContext.of(language, request.task, bool(hypothesis), shared)
                choice = self.policy.choose(context, auto_arms(hypothesis, self.draft, arm))
                arm = choice.arm
            drafter = make_drafter(arm, hypothesis, self.draft, encoded.handle, rules, tok.eot, session.cross)
        spec = None
        if drafter is not None and request.hypothesis_tokens:
            # a re-decode's previous hypothesis is nearly free and mostly right: verify long runs
            # of it per pass (the draft decoder caps its own rounds: DraftDecoderDrafter.max_k)
            spec = hypothesis_spec_options(tok.eot, request.hypothesis_tokens, self.compute_type)
        if drafter is not None and choice is not None:  # rounds priced at the measured plain step
            spec = dataclasses.replace(spec or SpecOptions(eot=tok.eot), plain_ms=self.policy.plain_ms(choice.context))
        sequence = window_sequence(session, prompt, rules, options, drafter, self.dims.n_text_ctx, spec)
        learn = None
        if self.adapter is not None and request.temperature == 0 and self.draft.pays_for(language, request.task):
            group = draft_group(language, request.task)
            learn = lambda tokens: self.adapter.observe(encoded.handle, prompt, tokens, rules, group)  # noqa: E731
        return DecodeJob(sequence, options, encoded.duration, language, language_probability, request.temperature,
                         learn, choice)

    def _hypothesis_group(self, session: DecoderSession, prompt: list[int], rules: WhisperLogitRules,
                          options: GenerateOptions, request: DecodeRequest) -> BeamSequence | SampleGroup:
        """A beam search (temperature 0) or best-of sampling: every hypothesis a row of the same pass,
        no drafts (models/beam.py)."""
        spec = window_spec_options(options, self.dims.n_text_ctx)
        if request.temperature == 0:
            beam = BeamOptions(request.beam_size, request.patience, request.length_penalty, request.n_best)
            return BeamSequence(session, rules, prompt, spec, beam)
        return SampleGroup(session, rules, prompt, spec, request.best_of, request.length_penalty, request.seed,
                           request.n_best)

    def finish_decode(self, job: DecodeJob, res: SpecResult) -> WindowResult:
        from specscribe.models.ct2_engine import split_segments  # the same segments as the ct2 engine

        gen, tok = to_generation(res, job.options), self.tokenizer
        tokens = list(gen.tokens)
        if job.learn is not None and tokens and res.stats.tokens > len(tokens):  # ended by end-of-text
            job.learn(tokens)
        if job.choice is not None:
            self.policy.done(job.choice, res.stats)
        alternatives = []
        for alt in res.alternatives:
            g = to_generation(alt, job.options)
            text = [(t, lp) for t, lp in zip(g.tokens, g.logprobs) if t < tok.eot]  # timestamps dropped
            ids = tuple(t for t, _ in text)
            alternatives.append(Alternative(tok.decode(list(ids)), ids, g.avg_logprob, tuple(lp for _, lp in text)))
        return WindowResult(
            tokens=tuple(tokens),
            text=tok.decode(tokens),
            segments=split_segments(tokens, tok, job.duration, self.decode_tokens),
            language=job.language,
            language_probability=job.language_probability,
            avg_logprob=gen.avg_logprob,
            no_speech_prob=gen.no_speech_prob,
            temperature=job.temperature,
            stats=res.stats,
            token_logprobs=gen.logprobs,
            alternatives=tuple(alternatives),
        )

    def align_words(self, encoded: EncodedAudio, result: WindowResult) -> tuple[Segment, ...]:
        """One extra target pass over the final tokens (models/alignment.py). Word probabilities
        are the decode's own (token_logprobs), so that pass skips the output head."""
        tok = self.tokenizer
        session = self.session(encoded)
        num_frames = min(N_FRAMES, int(round(encoded.duration * SAMPLE_RATE / HOP_LENGTH)))
        text = [t for t in result.tokens if t < tok.eot]
        text_probs = None
        if len(result.token_logprobs) == len(result.tokens) and text == [
            t for seg in result.segments for t in seg.tokens if t < tok.eot
        ]:
            text_probs = [math.exp(lp) for t, lp in zip(result.tokens, result.token_logprobs) if t < tok.eot]
        return align_words(
            lambda tokens, logits_from: session.forward(tokens, return_cross_attention=True, logits_from=logits_from),
            tok.sot_sequence("transcribe", result.language),
            tok.no_timestamps,
            tok.eot,
            tok.for_task("transcribe", result.language).split_to_word_tokens,
            self._alignment_heads,
            result.segments,
            encoded.duration,
            num_frames,
            text_probs,
        )

    def encode_text(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text))

    def decode_tokens(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(tokens)


def _read_config(folder: Path) -> dict:
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
