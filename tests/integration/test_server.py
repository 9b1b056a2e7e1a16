"""The server on the real model (base) and the real StreamSession: JFK over the WebSocket, and the
OpenAI-compatible endpoint driven by the `openai` Python client.

Runs on the default engine (spec, as `specscribe serve` starts) and on the ct2 baseline. base
transcribes JFK with 0 % WER on both engines, streamed or not, so a single wrong word of its 22
fails (pipeline/wer.py's normalization). Its streamed English "translation" is made a sentence of
finals at a time, from shorter audio. Its spans used to cut the last sound of "Americans" (the next
word's start, which ends a span, was put in the pause before it): 1-3 wrong words ("America",
"America is"); with word starts moved to their speech (stream_jobs.speech_onsets) and 0.5 s after a
group's last word, 0 on both engines at four lead-ins. More than 1 fails."""

from __future__ import annotations

import asyncio

import pytest

from specscribe.clips import JFK_TEXT
from specscribe.pipeline.wer import normalize, wer

pytestmark = pytest.mark.integration

JFK_WORDS = len(normalize(JFK_TEXT).split())  # 22


def wrong_words(hypothesis: str) -> int:
    """Edits (substitutions, deletions, insertions) against JFK's reference."""
    return round(wer(JFK_TEXT, hypothesis) * JFK_WORDS)


@pytest.fixture(scope="module", params=["spec", "ct2"])
def server(base_model_dir, request):
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.web.server import BackgroundServer, ServerOptions, create_app

    transcriber = load_transcriber(EngineOptions(engine=request.param, model=str(base_model_dir)))
    assert transcriber.name == request.param
    options = ServerOptions()
    with BackgroundServer(create_app(transcriber, options), options) as srv:
        yield srv


@pytest.fixture(scope="module")
def jfk(clips_dir):
    from specscribe.pipeline.audio import load_audio

    return load_audio(clips_dir / "jfk.flac")


def test_websocket_jfk_with_translation(server, jfk):
    from specscribe.web.client import StreamRequest, stream_audio

    request = StreamRequest(url=server.ws_url, language="en", translate=True, speed=4.0, tail_silence=1.0)
    result = asyncio.run(stream_audio(jfk, request))
    kinds = [m["type"] for m in result.messages]
    assert kinds[0] == "ready" and result.close_code == 1000 and not result.errors
    assert kinds[-1] == "stats" and result.messages[-1]["reason"] == "close"  # every final came before the close
    assert {"speech_start", "speech_end", "partial", "final", "translation"} <= set(kinds)
    assert wrong_words(result.text) == 0, result.text
    assert [f["id"] for f in result.finals] == list(range(len(result.finals)))
    starts = [f["start"] for f in result.finals]
    assert starts == sorted(starts) and result.finals[-1]["end"] <= len(jfk) / 16000 + 1.0
    english = " ".join(m["text"] for m in result.messages if m["type"] == "translation")
    assert wrong_words(english) <= 1, english
    stats = result.messages[-1]["stats"]
    assert stats["finals"] == len(result.finals) and stats["audio_seconds"] >= len(jfk) / 16000


def test_openai_client_against_the_endpoint(server, clips_dir):
    openai = pytest.importorskip("openai")  # in the test extra; raw-HTTP checks are in tests/unit/test_http_api.py
    client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", timeout=300, max_retries=0)
    with open(clips_dir / "jfk.flac", "rb") as fh:
        result = client.audio.transcriptions.create(model="whisper-1", file=fh, language="en")
    assert wrong_words(result.text) == 0, result.text
    with open(clips_dir / "jfk.flac", "rb") as fh:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="verbose_json", timestamp_granularities=["word", "segment"]
        )
    assert verbose.language == "en" and 10.0 < verbose.duration < 12.0
    assert verbose.segments and verbose.words and wrong_words(verbose.text) == 0, verbose.text
    with open(clips_dir / "jfk.flac", "rb") as fh:
        srt = client.audio.transcriptions.create(model="whisper-1", file=fh, response_format="srt")
    assert srt.startswith("1\n00:00:00,") and "country" in srt.lower()
    import json
    import urllib.request

    health = json.loads(urllib.request.urlopen(server.http_url + "/healthz", timeout=10).read())
    assert health["model_sessions"] == 0  # finished requests leave nothing behind in the scheduler
