"""Shared helpers of the browser tests: headless Chromium with a fake microphone (a WAV file), and a scripted stand-in
for `/v1/listen` that serves web/static/ and plays a scenario per connection, chosen by the page's `?api_key=`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import wave
from collections import defaultdict
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "web" / "static"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def fake_mic_wav(audio: np.ndarray, path: Path) -> Path:
    """16 kHz mono PCM16 WAV for Chromium's fake microphone, with 0.5 s of silence before (it starts at once)."""
    audio = np.concatenate([np.zeros(8000, dtype=np.float32), audio])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def chromium(wav: Path, profile: Path, *, loop: bool = False):
    """Headless Chromium whose microphone plays `wav` (once, or over and over with `loop`), via chromedriver."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.fail("chromium/chromedriver missing: apt-get install -y chromium chromium-driver (make test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}{'' if loop else '%noloop'}",
        f"--user-data-dir={profile}", "--window-size=900,1100", "--autoplay-policy=no-user-gesture-required",
    ):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))


class Connection:
    """One WebSocket connection to the mock: what the page sent, and the scenario's means to answer."""

    def __init__(self, ws, number: int, server: MockListen):
        self.ws, self.number, self.server = ws, number, server
        self.config: dict | None = None
        self.texts: list[dict] = []  # the control messages after the config
        self.audio_bytes = 0

    async def send(self, **msg) -> None:
        await self.ws.send(json.dumps(msg))

    async def ready(self) -> None:
        """Take the page's config and answer `ready`."""
        self.config = json.loads(await self.ws.recv())
        await self.send(type="ready", protocol=1, session_id=f"mock{self.number}", model="mock", engine="spec",
                        config=self.config, limits={})

    async def final(self, id: int, text: str, start: float, end: float, language: str = "en") -> None:
        await self.send(type="final", emitted_at=end, id=id, start=start, end=end, text=text, words=[],
                        language=language)

    async def line(self, id: int, text: str, start: float, end: float, language: str = "en") -> None:
        await self.send(type="line", emitted_at=end, id=id, start=start, end=end, text=text, language=language)

    async def until_close(self) -> None:
        """Take audio until the page sends {"type":"close"}."""
        async for message in self.ws:
            if isinstance(message, bytes):
                self.audio_bytes += len(message)
                continue
            self.texts.append(json.loads(message))
            if self.texts[-1].get("type") == "close":
                return

    async def finish(self) -> None:
        """Answer `close` as the real server does: stats, then close frame 1000."""
        await self.send(type="stats", stats={}, reason="close")
        await self.ws.close(1000)

    async def gate(self, name: str) -> None:
        """Wait until the test calls MockListen.open_gate(name)."""
        await self.server._gate(name).wait()


Scenario = Callable[[Connection], Awaitable[None]]


class MockListen:
    """web/static/ over HTTP and a scripted /v1/listen, on a free loopback port, in a thread of its own.
    `scenarios` maps an api_key to the coroutine that plays that connection; `slow_handshake` names the keys
    whose WebSocket handshake waits that many seconds. `connections[key]` keeps each connection's Connection."""

    def __init__(self, scenarios: dict[str, Scenario], slow_handshake: dict[str, float] | None = None):
        self.scenarios, self.slow_handshake = scenarios, slow_handshake or {}
        self.connections: dict[str, list[Connection]] = defaultdict(list)
        self._gates: dict[str, asyncio.Event] = {}
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.url = ""

    def __enter__(self) -> MockListen:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the mock server did not start")
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def open_gate(self, name: str) -> None:
        self._loop.call_soon_threadsafe(lambda: self._gate(name).set())

    def _gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    @staticmethod
    def _key(path: str) -> str:
        return parse_qs(urlsplit(path).query).get("api_key", [""])[0]

    async def _process_request(self, conn, request):
        from websockets.datastructures import Headers
        from websockets.http11 import Response

        path = urlsplit(request.path).path
        if path == "/v1/listen":
            await asyncio.sleep(self.slow_handshake.get(self._key(request.path), 0))
            return None
        file = STATIC / ("index.html" if path == "/" else path.lstrip("/"))
        types = {".js": "text/javascript", ".html": "text/html", ".css": "text/css"}
        if file.parent != STATIC or not file.is_file() or file.suffix not in types:
            return conn.respond(404, "not found\n")
        body = file.read_bytes()
        headers = Headers([("Content-Type", types[file.suffix]), ("Content-Length", str(len(body))),
                           ("Cache-Control", "no-store")])
        return Response(200, "OK", headers, body)

    async def _handler(self, ws) -> None:
        key = self._key(ws.request.path)
        connection = Connection(ws, len(self.connections[key]) + 1, self)
        self.connections[key].append(connection)
        await self.scenarios[key](connection)

    async def _main(self) -> None:
        from websockets.asyncio.server import serve

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        quiet = logging.getLogger("pagekit.mock")
        quiet.setLevel(logging.CRITICAL)
        server = await serve(self._handler, "127.0.0.1", 0, process_request=self._process_request, logger=quiet,
                             close_timeout=1)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
        self._started.set()
        await self._stop.wait()
        server.close()
        try:
            await asyncio.wait_for(server.wait_closed(), 3)
        except TimeoutError:
            pass  # a scenario still waiting: asyncio.run cancels it
