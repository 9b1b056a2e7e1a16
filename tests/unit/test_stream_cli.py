"""`specscribe stream` against small local servers (no model): Ctrl-C closes the stream and keeps its finals, and a
server that is not a WebSocket server gives one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
from websockets.sync.server import serve
from wavs import write_wav

from specscribe.cli import main


@pytest.fixture
def wav(tmp_path):
    return write_wav(tmp_path / "five.wav", np.zeros(5 * 16000, np.int16))


class Server:
    """A /v1/listen stand-in in a thread. answer_close: on `close`, send a final for the audio received and close."""

    def __init__(self, answer_close: bool) -> None:
        self.answer_close = answer_close
        self.audio_bytes = 0
        self.got_close = threading.Event()
        self._server = serve(self._handle, "127.0.0.1", 0)
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}/v1/listen"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handle(self, ws) -> None:
        json.loads(ws.recv())  # config
        ws.send(json.dumps({"type": "ready"}))
        for frame in ws:
            if isinstance(frame, bytes):
                self.audio_bytes += len(frame)
            elif json.loads(frame)["type"] == "close":
                self.got_close.set()
                if self.answer_close:
                    final = {"type": "final", "text": f"{self.audio_bytes} bytes", "start": 0.0, "end": 1.0}
                    ws.send(json.dumps(final))
                    ws.send(json.dumps({"type": "stats", "reason": "close"}))
                    ws.close()
                    return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._thread.join(5)


class ctrl_c_after:
    """Ctrl-C (SIGINT to this process) after each of these delays, while the `with` block runs (not after it: a
    stray one would stop pytest)."""

    def __init__(self, *seconds: float) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._timers = [threading.Timer(s, self._kill) for s in seconds]

    def _kill(self) -> None:
        with self._lock:
            if not self._done:
                os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self):
        for t in self._timers:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._done = True
        for t in self._timers:
            t.cancel()
            t.join()


def test_ctrl_c_sends_close_and_prints_the_finals_of_the_audio_sent(wav, capsys):
    with Server(answer_close=True) as server:
        t0 = time.monotonic()
        with ctrl_c_after(0.6):
            rc = main(["stream", str(wav), "--url", server.url, "--format", "json"])
        elapsed = time.monotonic() - t0
    assert rc == 0  # was 130, with no close sent and the finals lost
    assert server.got_close.is_set()
    assert 0 < server.audio_bytes < 2 * 16000 * 2  # stopped sending well before the 5 s (+1 s tail) were sent
    messages = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [m["type"] for m in messages] == ["ready", "final", "stats"]
    assert messages[1]["text"] == f"{server.audio_bytes} bytes"
    assert elapsed < 3


def test_a_second_ctrl_c_exits_at_once(wav):
    with Server(answer_close=False) as server:  # never closes: only the second Ctrl-C ends the client
        t0 = time.monotonic()
        with ctrl_c_after(0.5, 1.0):
            rc = main(["stream", str(wav), "--url", server.url, "--format", "json"])
        assert rc == 130 and server.got_close.is_set()
        assert time.monotonic() - t0 < 4


RESPONSES = {
    "InvalidUpgrade": b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
    "InvalidHeader": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "InvalidStatus": b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("kind", sorted(RESPONSES))
def test_a_server_that_fails_the_handshake_gives_one_line(wav, capsys, kind):
    """Every websockets handshake error (subclasses included) is one line, exit 1: not a traceback."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(RESPONSES[kind])
        time.sleep(0.5)
        conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        rc = main(["stream", str(wav), "--url", f"ws://127.0.0.1:{listener.getsockname()[1]}/v1/listen"])
    finally:
        thread.join(5)
        listener.close()
    assert rc == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specscribe stream: error: "), err


def test_a_bad_url_gives_one_line(wav, capsys):
    assert main(["stream", str(wav), "--url", "http://127.0.0.1:9/v1/listen"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("specscribe stream: error: "), err
