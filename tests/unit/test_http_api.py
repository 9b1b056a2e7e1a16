"""The OpenAI-compatible REST endpoint's input checks and formats (fake transcriber; no weights)."""

from __future__ import annotations

import io
import wave

import httpx
import numpy as np
import pytest
from web_fakes import FakeSession, FakeTranscriber, ServerThread

from specscribe.models.types import Segment, SpecStats, Word
from specscribe.pipeline.longform import WindowInfo
from specscribe.web.http_api import render, subtitles
from specscribe.web.security import SecurityOptions
from specscribe.web.server import ServerOptions, create_app


@pytest.fixture(scope="module")
def server():
    options = ServerOptions(security=SecurityOptions(api_key="k"), max_upload_bytes=200_000)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        yield srv


def _wav(seconds: float = 0.5) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(np.zeros(int(seconds * 16000), dtype="<i2").tobytes())
    return buf.getvalue()


def post(srv, files=None, data=None, key="k"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(srv.http_url + "/v1/audio/transcriptions", files=files, data=data, headers=headers, timeout=30)


def test_needs_the_api_key(server):
    r = post(server, files={"file": ("a.wav", _wav())}, key=None)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert post(server, files={"file": ("a.wav", _wav())}, key="wrong").status_code == 401


@pytest.mark.parametrize(
    "files, data, status, param",
    [
        (None, {"model": "whisper-1"}, 400, "file"),
        ({"file": ("a.wav", b"this is not audio at all")}, None, 400, "file"),
        ({"file": ("a.wav", _wav())}, {"response_format": "docx"}, 400, "response_format"),
        ({"file": ("a.wav", b"\0" * 300_000)}, None, 413, "file"),
    ],
)
def test_bad_requests_get_openai_style_errors(server, files, data, status, param):
    r = post(server, files=files, data=data)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and "Traceback" not in r.text


def test_cors_only_for_allowed_origins():
    options = ServerOptions(security=SecurityOptions(api_key="k", allowed_origins=("https://app.example",)))
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        url = srv.http_url + "/v1/audio/transcriptions"
        ok = httpx.options(url, headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
        assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
        bad = httpx.options(url, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in bad.headers


def test_models_endpoint(server):
    r = httpx.get(server.http_url + "/v1/models", headers={"X-API-Key": "k"}, timeout=10)
    assert r.json()["data"][0]["id"] == "fake-model"


def test_render_formats():
    class T:
        text = "ask not"
        language = "en"
        duration = 3.0
        segments = (Segment(0.0, 1.5, " ask", (1,), (Word(0.0, 1.5, " ask"),)), Segment(1.5, 3.25, " not", (2,)))
        windows = (
            WindowInfo(0, 0.0, 3.25, "translate", 0.0, 1, False, -0.9, 0.5, 1.1, SpecStats()),
            WindowInfo(0, 0.0, 3.25, "transcribe", 0.2, 2, False, -0.25, 0.01, 1.3, SpecStats()),
        )

    assert render(T, "json", "transcribe", False).body == b'{"text":"ask not"}'
    assert render(T, "text", "transcribe", False).body == b"ask not\n"
    srt = subtitles(T.segments, "srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:01,500\nask\n") and "00:00:03,250" in srt
    assert subtitles(T.segments, "vtt").startswith("WEBVTT")
    import json

    verbose = json.loads(render(T, "verbose_json", "transcribe", True).body)
    assert verbose["segments"][1]["start"] == 1.5 and verbose["words"] == [{"word": "ask", "start": 0.0, "end": 1.5}]
    # the decode's own figures, from the transcribe window the segment came from
    seg = verbose["segments"][1]
    assert (seg["avg_logprob"], seg["no_speech_prob"], seg["temperature"], seg["compression_ratio"]) == (-0.25, 0.01, 0.2, 1.3)


@pytest.mark.parametrize(
    "data, param",
    [
        ({"beam_size": "0"}, "beam_size"),
        ({"beam_size": "99"}, "beam_size"),
        ({"beam_size": "five"}, "beam_size"),
        ({"beam_size": "2", "n_best": "3"}, "n_best"),
        ({"patience": "-1"}, "patience"),
        ({"multilingual": "maybe"}, "multilingual"),
        ({"multilingual": "true", "language": "en"}, "multilingual"),
        ({"hotwords": "x" * 501}, "hotwords"),
    ],
)
def test_search_fields_are_checked(server, data, param):
    r = post(server, files={"file": ("a.wav", _wav())}, data=data)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_search_fields_become_longform_options():
    from specscribe.web.http_api import search_options

    got = search_options({"beam_size": "5", "n_best": "3", "best_of": "2", "patience": "1.5", "length_penalty": "0",
                          "hotwords": " ComfyUI ", "multilingual": "true"})
    assert got == {"beam_size": 5, "n_best": 3, "best_of": 2, "patience": 1.5, "length_penalty": 0.0,
                   "hotwords": "ComfyUI", "multilingual": True}
    assert search_options({}) == {}


def test_verbose_json_carries_segment_alternatives_and_language():
    import json

    from specscribe.models.types import Alternative

    alts = (Alternative(" ask not", (1, 2), -0.1), Alternative(" asked not", (3, 2), -0.4))

    class T:
        text = "ask not"
        language = "en"
        duration = 1.0
        segments = (Segment(0.0, 1.0, " ask not", (1, 2), alternatives=alts, language="en"),)
        windows = ()

    seg = json.loads(render(T, "verbose_json", "transcribe", False).body)["segments"][0]
    assert seg["language"] == "en"
    assert seg["alternatives"] == [{"text": "ask not", "tokens": [1, 2], "avg_logprob": -0.1},
                                   {"text": "asked not", "tokens": [3, 2], "avg_logprob": -0.4}]


class _Transcript:
    text, language, duration, segments, windows = "ok", "en", 0.0, (), ()


def test_an_upload_longer_than_max_upload_seconds_gets_413(monkeypatch):
    """The byte limit alone lets a low-bitrate upload decode to hours of float32 (docs/security.md, Limits)."""
    import specscribe.pipeline.longform as longform

    monkeypatch.setattr(longform, "transcribe_audio", lambda *a, **k: _Transcript())
    options = ServerOptions(max_upload_seconds=1.0)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        r = post(srv, files={"file": ("a.wav", _wav(2.0))}, key=None)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["param"] == "file" and r.json()["error"]["code"] == "audio_too_long"
        assert "1 seconds" in r.json()["error"]["message"]
        assert post(srv, files={"file": ("a.wav", _wav(0.5))}, key=None).json() == {"text": "ok"}
    assert ServerOptions().max_upload_seconds >= 3600  # the default takes hours of audio


def test_load_audio_stops_decoding_at_max_seconds():
    """The limit stops the decoder where it is passed; it does not decode everything and then check."""
    from specscribe.pipeline.audio import AudioError, AudioTooLong, load_audio

    class Counted(io.BytesIO):
        read_bytes = 0

        def read(self, n=-1):
            out = super().read(n)
            self.read_bytes += len(out)
            return out

    data = _wav(60.0)  # 1.9 MB
    source = Counted(data)
    with pytest.raises(AudioTooLong):
        load_audio(source, max_seconds=1.0)
    assert source.read_bytes < len(data) // 4  # PyAV reads ahead (~0.2 MB here), not the whole file
    assert issubclass(AudioTooLong, AudioError)  # callers that catch AudioError keep working
    assert load_audio(data, max_seconds=60.0).size == 60 * 16000
    assert load_audio(data).size == 60 * 16000  # no limit by default


def test_uploads_are_decoded_only_while_they_hold_a_job_slot(monkeypatch):
    """Decoded audio is big (230 MB an hour): only the max_rest_jobs uploads being transcribed may hold it, so an
    upload waiting for its turn is decoded when it gets it, not before."""
    import asyncio
    import threading
    import time

    import specscribe.pipeline.longform as longform
    import specscribe.web.http_api as http_api

    lock, busy, peak = threading.Lock(), [0], [0]

    def tracked(work):
        def wrapper(*args, **kwargs):
            with lock:
                busy[0] += 1
                peak[0] = max(peak[0], busy[0])
            try:
                time.sleep(0.2)
                return work(*args, **kwargs)
            finally:
                with lock:
                    busy[0] -= 1
        return wrapper

    monkeypatch.setattr(http_api, "load_audio", tracked(http_api.load_audio))
    monkeypatch.setattr(longform, "transcribe_audio", tracked(lambda *a, **k: _Transcript()))
    options = ServerOptions(max_rest_jobs=1)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        async def three():
            async with httpx.AsyncClient(timeout=30) as client:
                url = srv.http_url + "/v1/audio/transcriptions"
                return await asyncio.gather(*(client.post(url, files={"file": ("a.wav", _wav())}) for _ in range(3)))

        assert [r.status_code for r in asyncio.run(three())] == [200] * 3
    assert peak[0] == 1  # one decode or transcription at a time, never a decode beside a transcription
