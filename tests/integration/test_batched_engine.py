"""The batched engine on the real model at the default compute type: a window's tokens are the same
bits decoded alone or among others, sequences joining and leaving; a file's text does not depend
on how many of its lanes run at once; `--batch-size` does not change the outputs of a folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(base_model_dir):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    return SpecEngine(base_model_dir, EngineOptions(engine="spec", model="base"))  # auto: the default


@pytest.fixture(scope="module")
def windows(engine, clips_dir):
    from specscribe.clips import evaluation_windows

    clips = evaluation_windows(clips_dir)
    return {name: engine.encode(audio) for name, audio in clips.items()}


def _requests(engine, windows):
    """Eight windows, mixed tasks, timestamps on and off, one with a previous hypothesis."""
    jfk = engine.decode(windows["jfk"], DecodeRequest(language="en")).tokens
    out = []
    for i, name in enumerate(windows):
        language = "de" if name == "multilingual-de" else "en"
        task = "translate" if name == "multilingual-de" else "transcribe"
        request = DecodeRequest(task=task, language=language, timestamps=i % 2 == 0)
        if name == "jfk":
            request = DecodeRequest(language="en", hypothesis_tokens=jfk[: len(jfk) // 2])
        out.append((windows[name], request))
    return out


def test_a_window_decodes_to_the_same_bits_alone_and_in_a_batch(engine, windows):
    items = _requests(engine, windows)
    alone = [engine.decode(encoded, request) for encoded, request in items]
    together = engine.decode_many(items)
    for a, b in zip(alone, together):
        assert a.tokens == b.tokens and a.token_logprobs == b.token_logprobs
        assert a.no_speech_prob == b.no_speech_prob
    assert all(len(r.tokens) > 3 for r in alone)


def test_sequences_join_and_leave_between_passes(engine, windows):
    items = _requests(engine, windows)
    alone = {i: engine.decode(e, r) for i, (e, r) in enumerate(items)}
    loop = engine.decode_loop()
    got, steps, pending = {}, 0, list(enumerate(items))
    for i, (encoded, request) in pending[:3]:
        loop.submit(i, encoded, request)
    pending = pending[3:]
    while len(loop) or pending:
        if steps % 5 == 4 and pending:  # join mid-way, while others are decoding
            i, (encoded, request) = pending.pop(0)
            loop.submit(i, encoded, request)
        got.update(loop.step())
        steps += 1
    assert {i: r.tokens for i, r in got.items()} == {i: r.tokens for i, r in alone.items()}
    assert loop.batch.totals.max_sequences >= 3


def test_a_file_text_depends_on_its_lanes_not_on_how_many_run_at_once(engine, clips_dir):
    from specscribe.pipeline.audio import load_audio
    from specscribe.pipeline.longform import LongformOptions, transcribe_audio

    audio = load_audio(clips_dir / "multilingual.mp3")
    options = LongformOptions(language="en")
    one = transcribe_audio(engine, audio, options, lanes=2, width=1)
    two = transcribe_audio(engine, audio, options, lanes=2, width=2)
    assert [(s.start, s.end, s.text) for s in one.segments] == [(s.start, s.end, s.text) for s in two.segments]
    assert len(one.segments) >= 2


def test_batch_size_does_not_change_a_folders_outputs(clips_dir, tmp_path):
    from specscribe.clips import librivox_clips

    inputs = [str(clips_dir / "jfk.flac")] + [str(p) for p in sorted(librivox_clips(clips_dir))]
    outs = {}
    for size in (1, 8):
        folder = tmp_path / f"b{size}"
        cmd = [sys.executable, "-m", "specscribe", "transcribe", *inputs, "-f", "json", "-o", str(folder),
               "--language", "en", "--batch-size", str(size), "-q"]
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
        outs[size] = {p.name: [(s["start"], s["end"], s["text"]) for s in json.loads(p.read_text())["segments"]]
                      for p in sorted(folder.glob("*.json"))}
    assert len(outs[1]) == len(inputs) and outs[1] == outs[8]
