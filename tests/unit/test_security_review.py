"""The fixes of the security review (docs/security.md), one test each: a chunked upload is cut off at the
limit instead of being spooled whole; errors of the REST endpoint name no path or exception text; an
unknown language is refused up front; the server holds at most max_connections connections."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import numpy as np
import pytest
from web_fakes import FakeSession, FakeTranscriber, ServerThread

from specscribe.web.http_api import ApiError, RestApi
from specscribe.web.security import SecurityOptions
from specscribe.web.server import ServerOptions, create_app

SECRET = "/root/.cache/specscribe/models/base/model.bin"


def _request(chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    """A starlette Request whose body arrives as chunks (chunked: no content-length); counts reads."""
    from starlette.requests import Request

    reads = {"n": 0}

    async def receive():
        i = reads["n"]
        reads["n"] += 1
        if i < len(chunks):
            return {"type": "http.request", "body": chunks[i], "more_body": i + 1 < len(chunks)}
        return {"type": "http.disconnect"}

    scope = {"type": "http", "method": "POST", "path": "/v1/audio/transcriptions", "headers": headers, "query_string": b""}
    return Request(scope, receive), reads


def test_a_chunked_upload_is_cut_off_at_the_limit_not_spooled_whole():
    api = RestApi(FakeTranscriber(), ServerOptions(max_upload_bytes=200_000))
    boundary = b"xyz"
    head = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
    chunks = [head] + [b"\0" * 65536] * 200 + [b"\r\n--xyz--\r\n"]  # 13 MB, no content-length
    request, reads = _request(chunks, [(b"content-type", b"multipart/form-data; boundary=" + boundary)])
    with pytest.raises(ApiError) as info:
        asyncio.run(api._read_form(request))
    assert info.value.status == 413
    assert reads["n"] <= 6  # (200 000 + 65 536) / 65 536 chunks, not all 202


def test_a_chunked_upload_under_the_limit_still_works():
    api = RestApi(FakeTranscriber(), ServerOptions(max_upload_bytes=200_000))
    body = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n" + b"\1" * 1000 + b"\r\n--xyz--\r\n"
    request, _ = _request([body[:50], body[50:]], [(b"content-type", b"multipart/form-data; boundary=xyz")])
    fields, data = asyncio.run(api._read_form(request))
    assert data == b"\1" * 1000


@pytest.fixture(scope="module")
def server():
    options = ServerOptions(max_upload_bytes=2_000_000)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        yield srv


def _wav_bytes() -> bytes:
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((np.sin(np.arange(16000) / 5) * 8000).astype("<i2").tobytes())
    return buf.getvalue()


@pytest.mark.parametrize("error", [ValueError(f"{SECRET}: bad tensor"), KeyError(SECRET), RuntimeError(f"{SECRET} is corrupt")])
def test_transcription_errors_name_no_path_or_exception(server, monkeypatch, error):
    import specscribe.pipeline.longform as longform

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(longform, "transcribe_audio", fail)
    r = httpx.post(server.http_url + "/v1/audio/transcriptions", files={"file": ("a.wav", _wav_bytes())}, timeout=30)
    assert r.status_code in (400, 500)
    body = r.json()["error"]
    assert "/root" not in r.text and "model.bin" not in r.text and type(error).__name__ not in r.text
    assert body["type"] == ("server_error" if r.status_code == 500 else "invalid_request_error")


def test_decoder_internals_are_not_echoed(server, monkeypatch):
    import specscribe.web.http_api as http_api
    from specscribe.pipeline.audio import AudioError

    def fail(data, **kwargs):
        raise AudioError(f"cannot decode audio (InvalidDataError: [Errno 1094995529] Invalid data: '{SECRET}')")

    monkeypatch.setattr(http_api, "load_audio", fail)
    r = httpx.post(server.http_url + "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"] == "could not read the uploaded file: cannot decode audio"


def test_unknown_language_is_refused_up_front(server, monkeypatch):
    import specscribe.pipeline.longform as longform

    called = []
    monkeypatch.setattr(longform, "transcribe_audio", lambda *a, **k: called.append(1))
    r = httpx.post(server.http_url + "/v1/audio/transcriptions", files={"file": ("a.wav", _wav_bytes())},
                   data={"language": "xx"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "language" and called == []


def test_connections_over_max_connections_get_503():
    """uvicorn counts the newcomer too: with a limit of 3, two hanging requests fill the server."""
    options = ServerOptions(max_connections=3)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        host, port = srv.http_url.removeprefix("http://").split(":")
        idle = []
        try:
            for _ in range(2):  # each starts an upload and never sends it (a slowloris client)
                s = socket.create_connection((host, int(port)), timeout=5)
                s.sendall(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                          b"Content-Type: multipart/form-data; boundary=xyz\r\n\r\n")
                idle.append(s)
                time.sleep(0.3)
            assert httpx.get(srv.http_url + "/healthz", timeout=10).status_code == 503
        finally:
            for s in idle:
                s.close()
        time.sleep(0.5)
        assert httpx.get(srv.http_url + "/healthz", timeout=10).status_code == 200


def test_a_model_given_as_a_path_is_announced_by_its_name_only():
    import json

    import websockets.sync.client as ws_client

    transcriber = FakeTranscriber()
    transcriber.model_name = "/srv/secret/models/large-v3/"
    options = ServerOptions()
    with ServerThread(create_app(transcriber, options, FakeSession), options) as srv:
        assert httpx.get(srv.http_url + "/healthz", timeout=10).json()["model"] == "large-v3"
        assert httpx.get(srv.http_url + "/v1/models", timeout=10).json()["data"][0]["id"] == "large-v3"
        with ws_client.connect(srv.ws_url) as ws:
            ws.send(json.dumps({"type": "config", "sample_rate": 16000}))
            ready = json.loads(ws.recv(timeout=10))
        assert ready["type"] == "ready" and ready["model"] == "large-v3" and "/srv" not in json.dumps(ready)


def _handshake_status(srv, host: str, origin: str) -> int:
    """The HTTP status of a WebSocket handshake to srv (on 127.0.0.1) that says Host `host` and Origin `origin`, as a
    browser does for a page at `origin` (with DNS rebinding, evil.example resolves to 127.0.0.1)."""
    import websockets
    import websockets.sync.client as ws_client

    port = int(srv.http_url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        with ws_client.connect(f"ws://{host}/v1/listen", sock=sock, origin=origin, proxy=None) as ws:
            ws.send('{"type":"config"}')
            assert '"ready"' in ws.recv(timeout=10)
            return 101
    except websockets.InvalidStatus as exc:
        return exc.response.status_code


def test_dns_rebinding_is_refused_on_a_loopback_server():
    """A page of evil.example whose name was rebound to 127.0.0.1 is same-origin with itself (its Origin matches its
    Host): a server on loopback answers it 403, over WebSocket and REST; pages at localhost or 127.0.0.1 still work."""
    options = ServerOptions()
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        port = srv.http_url.rsplit(":", 1)[1]
        evil = f"evil.example:{port}"
        assert _handshake_status(srv, evil, f"http://{evil}") == 403
        r = httpx.post(srv.http_url + "/v1/audio/transcriptions", files={"file": ("a.wav", _wav_bytes())},
                       headers={"Host": evil, "Origin": f"http://{evil}"}, timeout=30)
        assert r.status_code == 403 and r.json()["error"]["message"] == "origin not allowed"
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            assert _handshake_status(srv, host, f"http://{host}") == 101, host
        r = httpx.get(srv.http_url + "/v1/models", headers={"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})
        assert r.status_code == 200


def test_allowed_origins_do_not_lock_out_the_servers_own_page():
    options = ServerOptions(security=SecurityOptions(allowed_origins=("https://app.example",)))
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        own = srv.http_url.removeprefix("http://")
        assert _handshake_status(srv, own, srv.http_url) == 101  # the page this server serves
        assert _handshake_status(srv, own, "https://app.example") == 101
        assert _handshake_status(srv, own, "https://evil.example") == 403
