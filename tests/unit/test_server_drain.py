"""A serving replica's lifecycle (web/replica.py) with a fake transcriber and session (no weights):
/healthz, `busy` and REST 503 while the model loads and while the server drains; a drain that finishes an
open session's finals before close 1001 at its timeout, or ends as soon as the sessions do; a second
SIGTERM that does not wait; a model that fails to load is `specscribe serve`'s one error line."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import jsonschema
import pytest
import websockets
import websockets.sync.client as ws_client
from web_fakes import FakeSession, FakeTranscriber, ServerThread, to_pcm16, utterance

from specscribe.web import protocol as P
from specscribe.web.server import ServerOptions, create_app

SERVER_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs/schemas/server-messages.schema.json").read_text())
CONFIG = json.dumps({"type": "config", "sample_rate": 16000})


def health(srv) -> httpx.Response:
    return httpx.get(srv.http_url + "/healthz", timeout=10)


def post_file(srv) -> httpx.Response:
    return httpx.post(srv.http_url + "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, timeout=10)


def refused_session(srv) -> tuple[dict, int | None]:
    """A new connection: the server's first message (a refusal comes before any config) and its close code."""
    with ws_client.connect(srv.ws_url, open_timeout=10) as ws:
        first = json.loads(ws.recv(timeout=10))
        with pytest.raises(websockets.ConnectionClosed):
            ws.recv(timeout=10)
    return first, ws.close_code


def read_to_close(ws) -> list[dict]:
    messages = []
    try:
        while True:
            messages.append(json.loads(ws.recv(timeout=30)))
    except websockets.ConnectionClosed:
        return messages


@contextlib.contextmanager
def session_with_pending_final(srv) -> Iterator[Any]:
    """A session whose last utterance is not final yet (no trailing silence), every frame queued on the server."""
    with ws_client.connect(srv.ws_url, open_timeout=10) as ws:
        ws.send(CONFIG)
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        pcm = to_pcm16(utterance([1, 2, 3], gap_s=0.0))
        for i in range(0, len(pcm), 3200):
            ws.send(pcm[i : i + 3200])
        # An acknowledgement: the reader answers this unknown control with a non-fatal error, in order, so every
        # audio frame sent before it is in the session's inbox by then (ahead of any drain's stop).
        ws.send('{"type":"ack?"}')
        seen = []
        while not seen or seen[-1]["type"] != "error":
            seen.append(json.loads(ws.recv(timeout=10)))
        assert seen[-1]["code"] == P.ErrorCode.UNKNOWN_TYPE and not seen[-1]["fatal"]
        assert not [m for m in seen if m["type"] == "final"]  # w1 w2 w3 is still open
        yield ws


def test_while_loading_healthz_is_503_and_new_work_is_refused_then_ready():
    gate = threading.Event()

    def load():
        assert gate.wait(30), "the test never let the model load"
        return FakeTranscriber()

    options = ServerOptions()
    with ServerThread(create_app(None, options, FakeSession, load=load), options) as srv:
        r = health(srv)
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        busy, code = refused_session(srv)
        jsonschema.validate(busy, SERVER_SCHEMA)
        assert busy["type"] == "busy" and busy["reason"] == "loading" and code == P.CloseCode.TRY_AGAIN_LATER
        r = post_file(srv)
        assert r.status_code == 503 and r.json()["error"]["code"] == "loading"
        assert httpx.get(srv.http_url + "/v1/models", timeout=10).status_code == 503

        gate.set()
        deadline = time.monotonic() + 10
        while (r := health(srv)).status_code == 503:  # what a load balancer's health check does
            assert r.json()["status"] == "loading" and time.monotonic() < deadline
            time.sleep(0.05)
        assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["model"] == "fake-model"
        assert post_file(srv).status_code == 400  # admitted now: the upload itself is refused
        with ws_client.connect(srv.ws_url, open_timeout=10) as ws:
            ws.send(CONFIG)
            assert json.loads(ws.recv(timeout=10))["type"] == "ready"


def keep_talking(ws) -> threading.Thread:
    """Send word w4 (level 4, never ending) at twice real time until the server closes the connection."""
    frame = to_pcm16(utterance([4], word_s=0.1, gap_s=0.0))

    def send() -> None:
        try:
            while True:
                ws.send(frame)
                time.sleep(0.05)
        except websockets.ConnectionClosed:
            pass

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_drain_refuses_new_work_and_finishes_an_open_session_at_the_timeout():
    options = ServerOptions(drain_timeout=3.0)
    slow = FakeTranscriber(delay=0.3)  # model time: the client's frames keep arriving while the session finishes
    with ServerThread(create_app(slow, options, FakeSession), options) as srv:
        with session_with_pending_final(srv) as ws:
            talker = keep_talking(ws)  # the client streams on through the drain and after its timeout
            t0 = time.monotonic()
            srv.drain()
            r = health(srv)
            assert r.status_code == 503 and r.json()["status"] == "draining" and r.json()["sessions"] == 1
            busy, code = refused_session(srv)
            jsonschema.validate(busy, SERVER_SCHEMA)
            assert busy["reason"] == "draining" and code == P.CloseCode.TRY_AGAIN_LATER
            r = post_file(srv)
            assert r.status_code == 503 and r.json()["error"]["code"] == "draining"

            messages = read_to_close(ws)
            waited = time.monotonic() - t0
            talker.join(timeout=10)
        for m in messages:
            jsonschema.validate(m, SERVER_SCHEMA)
        assert not [m for m in messages if m["type"] == "error"], messages
        assert [m["text"] for m in messages if m["type"] == "final"] == ["w1 w2 w3 w4"]  # the open utterance, flushed
        assert messages[-1]["type"] == "stats" and messages[-1]["reason"] == "draining"
        assert messages[-1]["stats"]["finals"] == 1
        assert ws.close_code == P.CloseCode.GOING_AWAY
        assert waited >= 2.5  # the session ran on until the drain timeout
        srv.thread.join(timeout=15)
        assert not srv.thread.is_alive()  # the drain is over: the server stops by itself


def test_drain_ends_when_the_open_sessions_end():
    options = ServerOptions(drain_timeout=60.0)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        with session_with_pending_final(srv) as ws:
            t0 = time.monotonic()
            srv.drain()
            assert health(srv).json()["status"] == "draining"
            ws.send('{"type":"close"}')  # the client ends its session: a normal close, every final first
            messages = read_to_close(ws)
        assert [m["text"] for m in messages if m["type"] == "final"] == ["w1 w2 w3"]
        assert messages[-1]["reason"] == "close" and ws.close_code == P.CloseCode.NORMAL
        srv.thread.join(timeout=15)
        assert not srv.thread.is_alive() and time.monotonic() - t0 < 15  # not the 60 s timeout


def test_the_first_sigterm_drains_and_a_second_does_not_wait():
    options = ServerOptions(drain_timeout=60.0)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        with session_with_pending_final(srv) as ws:
            srv.server.handle_exit(signal.SIGTERM, None)  # what the signal calls (signals reach only the main thread)
            deadline = time.monotonic() + 10
            while health(srv).json()["status"] != "draining":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert srv.thread.is_alive()  # the open session holds the drain
            t0 = time.monotonic()
            srv.server.handle_exit(signal.SIGTERM, None)
            srv.thread.join(timeout=15)
            assert not srv.thread.is_alive() and time.monotonic() - t0 < 15
            read_to_close(ws)


def test_a_model_that_fails_to_load_is_one_error_line(tmp_path, capsys):
    from specscribe.cli import main

    assert main(["serve", "--model", str(tmp_path / "no-such-model"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("specscribe: error: unknown model"), err
    assert "Traceback" not in err


def test_a_connection_still_without_its_config_closes_at_the_drain_timeout():
    """It has nothing to flush: at the drain's timeout it closes with 1001 at once, not after its idle timeout
    (30 s by default, past the drain's grace, when the server would cut it)."""
    options = ServerOptions(drain_timeout=1.0)
    with ServerThread(create_app(FakeTranscriber(), options, FakeSession), options) as srv:
        with ws_client.connect(srv.ws_url, open_timeout=10) as ws:  # connected, config never sent
            t0 = time.monotonic()
            srv.drain()
            with pytest.raises(websockets.ConnectionClosed):
                ws.recv(timeout=20)
            waited = time.monotonic() - t0
        assert ws.close_code == P.CloseCode.GOING_AWAY and waited < 5
        srv.thread.join(timeout=15)
        assert not srv.thread.is_alive()
