"""The torch engine in float32 decodes exactly the token ids CTranslate2 decodes: greedy, and beam 5
(faster-whisper's default: patience 1, length penalty 1).

Same features (faster-whisper's FeatureExtractor), same prompt, same options (suppress -1 expanded as
faster-whisper does, suppress_blank, max_initial_timestamp 1 s, max_length 448), with and without
timestamps; language detection must agree too. Each engine runs its own encoder.
"""

from __future__ import annotations

import numpy as np
import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def engines(base_model_dir):
    from faster_whisper import WhisperModel

    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    spec = SpecEngine(base_model_dir, EngineOptions(engine="spec", model="base", compute_type="float32"))
    fw = WhisperModel(str(base_model_dir), device="cpu", compute_type="float32")
    return spec, fw




CLIP_NAMES = ["jfk", "0870", "0880", "0890", "0920", "0930", "multilingual-en", "multilingual-de"]


@pytest.fixture(scope="module")
def clips(clips_dir):
    from specscribe.clips import evaluation_windows

    return evaluation_windows(clips_dir)


_encoded: dict = {}


def _encode_both(engines, clips, name):
    """(ours, CTranslate2's) encoder outputs of a clip, computed once for the greedy and the beam test."""
    if name not in _encoded:
        spec, fw = engines
        _encoded[name] = (spec.encode(clips[name]), fw.encode(spec.features(clips[name])))
    return _encoded[name]


def _ct2_generate(fw, spec, encoder_output, request: DecodeRequest, language: str, beam_size: int = 1):
    from faster_whisper.transcribe import get_suppressed_tokens

    tokenizer = spec.tokenizer.for_task(request.task, language)
    prompt = fw.get_prompt(tokenizer, list(request.prompt_tokens), without_timestamps=not request.timestamps)
    assert prompt == spec.prompt(request, language)  # the same prompt on both sides
    result = fw.model.generate(
        encoder_output,
        [prompt],
        beam_size=beam_size,
        patience=1.0,
        length_penalty=1.0,
        max_length=448,
        return_scores=True,
        return_no_speech_prob=True,
        suppress_blank=request.suppress_blank,
        suppress_tokens=list(get_suppressed_tokens(tokenizer, list(request.suppress_tokens))),
        max_initial_timestamp_index=int(round(request.max_initial_timestamp / 0.02)),
    )[0]
    return result


@pytest.mark.parametrize("name", CLIP_NAMES)
def test_tokens_match_ctranslate2(engines, clips, name):
    spec, fw = engines
    assert 0 < len(clips[name]) <= 30 * 16000
    encoded, ct2_out = _encode_both(engines, clips, name)

    language, prob = spec.detect_language(encoded)
    ct2_token, ct2_prob = fw.model.detect_language(ct2_out)[0][0]
    assert language == ct2_token[2:-2], f"{name}: language {language} vs CTranslate2 {ct2_token}"
    assert abs(prob - ct2_prob) < 1e-3
    if name == "multilingual-de":
        assert language == "de"
    else:
        assert language == "en"

    for timestamps in (True, False):
        request = DecodeRequest(language=language, timestamps=timestamps)
        ours = spec.decode(encoded, request)
        ref = _ct2_generate(fw, spec, ct2_out, request, language)
        ref_tokens = tuple(ref.sequences_ids[0])
        assert len(ref_tokens) > 5
        assert ours.tokens == ref_tokens, (
            f"{name} timestamps={timestamps}: first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(ours.tokens, ref_tokens)) if a != b), min(len(ours.tokens), len(ref_tokens)))}"
        )
        ref_avg = ref.scores[0] * len(ref_tokens) / (len(ref_tokens) + 1)
        assert ours.avg_logprob == pytest.approx(ref_avg, abs=1e-3)
        assert ours.no_speech_prob == pytest.approx(ref.no_speech_prob, abs=1e-3)
        if timestamps:
            assert any(t >= spec.tokenizer.timestamp_begin for t in ours.tokens)
        else:
            assert not any(t >= spec.tokenizer.timestamp_begin for t in ours.tokens)


@pytest.mark.parametrize("name", [n for n in CLIP_NAMES if n != "multilingual-en"])  # its 46 s: test time
def test_beam_5_matches_ctranslate2(engines, clips, name):
    spec, fw = engines
    encoded, ct2_out = _encode_both(engines, clips, name)
    language = "de" if name == "multilingual-de" else "en"
    for timestamps in (True, False):
        request = DecodeRequest(language=language, timestamps=timestamps, beam_size=5)
        ours = spec.decode(encoded, request)
        ref_tokens = tuple(_ct2_generate(fw, spec, ct2_out, request, language, beam_size=5).sequences_ids[0])
        assert len(ref_tokens) > 5
        assert ours.tokens == ref_tokens, (
            f"{name} timestamps={timestamps} beam 5: first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(ours.tokens, ref_tokens)) if a != b), min(len(ours.tokens), len(ref_tokens)))}"
        )


def test_translate_and_previous_text_prompt_match(engines, clips):
    """The translate task and a <|startofprev|> prompt reach the same tokens too (German half)."""
    spec, fw = engines
    encoded, ct2_out = _encode_both(engines, clips, "multilingual-de")
    previous = spec.encode_text(" Permission is hereby granted, free of charge.")
    request = DecodeRequest(task="translate", language="de", timestamps=True, prompt_tokens=previous)
    ours = spec.decode(encoded, request)
    ref = _ct2_generate(fw, spec, ct2_out, request, "de")
    assert ours.tokens == tuple(ref.sequences_ids[0])
    assert np.isfinite(ours.avg_logprob)


def test_ct2_engine_decodes_a_short_window_after_a_long_prompt(base_model_dir, clips):
    """A streaming update: 200 characters of committed text as the prompt, then 1 s of audio whose
    token cap (26) is shorter than the prompt. CTranslate2 used to refuse it (max_length <= 0)."""
    from specscribe.models.ct2_engine import Ct2Engine
    from specscribe.models.engines import EngineOptions
    from specscribe.pipeline.stream_jobs import max_tokens_for

    engine = Ct2Engine(base_model_dir, EngineOptions(engine="ct2", model="base"))
    prompt = engine.encode_text(" And so, my fellow Americans, ask not what your country can do for you; ask what you" * 3)
    audio = clips["jfk"][: 16000]  # "And so" (1 s)
    request = DecodeRequest(language="en", timestamps=False, prompt_tokens=prompt[-60:], max_new_tokens=max_tokens_for(1.0))
    assert len(request.prompt_tokens) + 4 > request.max_new_tokens + 1
    result = engine.decode(engine.encode(audio, 6.0), request)
    assert "so" in result.text.lower() and len(result.tokens) <= request.max_new_tokens
