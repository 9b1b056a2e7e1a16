"""The probe for whole row-wise calls is run once and kept per machine (models/row_calls.py)."""

from __future__ import annotations

import json

import pytest
import torch

from specscribe.models import row_calls
from specscribe.models.weights import WhisperDims
from specscribe.models.whisper import WhisperModel

DIMS = WhisperDims(n_mels=8, n_audio_ctx=20, n_audio_state=64, n_audio_head=2, n_audio_layer=1,
                   n_vocab=300, n_text_ctx=32, n_text_state=64, n_text_head=2, n_text_layer=1)  # fmt: skip


@pytest.fixture
def probes(monkeypatch):
    """The probe's calls, answering True."""
    calls = []
    monkeypatch.setattr(row_calls, "whole_calls_keep_bits", lambda fns, rows, dtype, device: calls.append(rows) or True)
    return calls


def test_the_answer_is_probed_once_and_kept_under_its_key(tmp_path, probes):
    decoder, cache = WhisperModel(DIMS).decoder, tmp_path / "cache" / "row_calls.json"
    assert row_calls.whole_calls_ok(decoder, 8, cache) and probes == [8]
    assert row_calls.whole_calls_ok(decoder, 8, cache) and probes == [8]  # kept: not probed again
    assert row_calls.whole_calls_ok(decoder, 16, cache) and probes == [8, 16]  # another key
    kept = json.loads(cache.read_text())
    assert set(kept.values()) == {True} and len(kept) == 2
    key = row_calls.probe_key(decoder, 8)
    assert "torch" in key and "rows 8" in key and "v300" in key and str(torch.float32) in key
    cache.write_text(json.dumps({key: False}))  # the file's answer is the one given
    assert not row_calls.whole_calls_ok(decoder, 8, cache) and probes == [8, 16]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", json.dumps({"x": 1})])
def test_an_unreadable_cache_is_probed_and_rewritten(tmp_path, probes, content):
    decoder, cache = WhisperModel(DIMS).decoder, tmp_path / "row_calls.json"
    cache.write_text(content)
    assert row_calls.whole_calls_ok(decoder, 8, cache) and probes == [8]
    assert json.loads(cache.read_text())[row_calls.probe_key(decoder, 8)] is True


def test_a_cache_that_cannot_be_written_still_gives_the_answer(tmp_path, probes):
    (tmp_path / "file").write_text("")
    decoder = WhisperModel(DIMS).decoder
    assert row_calls.whole_calls_ok(decoder, 8, tmp_path / "file" / "row_calls.json") and probes == [8]
    assert not list(tmp_path.glob("**/.row_calls.*"))


def test_the_real_probe_answers_for_a_small_decoder(tmp_path):
    decoder = WhisperModel(DIMS).eval().decoder
    assert isinstance(row_calls.whole_calls_ok(decoder, 8, tmp_path / "row_calls.json"), bool)
