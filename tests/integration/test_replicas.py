"""A real `specscribe serve` replica as a load balancer sees it (docs/serving.md): /healthz is 503 "loading"
until the base model is loaded, then 200; SIGTERM in the middle of a JFK stream makes it drain (/healthz 503
"draining", a new session gets `busy`), the open stream still gets every final (0 wrong words of JFK's 22,
as in test_server.py), and the process exits 0 once that stream has closed."""

from __future__ import annotations

import asyncio
import json
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from specscribe.clips import JFK_TEXT
from specscribe.pipeline.wer import normalize, wer

pytestmark = pytest.mark.integration

JFK_WORDS = len(normalize(JFK_TEXT).split())  # 22


def healthz(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_sigterm_drains_a_replica_without_losing_the_open_streams_finals(base_model_dir, clips_dir):
    import websockets

    from specscribe.pipeline.audio import load_audio
    from specscribe.web.client import StreamRequest, stream_audio

    jfk = load_audio(clips_dir / "jfk.flac")
    cmd = [sys.executable, "-m", "specscribe", "serve", "--model", str(base_model_dir), "--port", "0",
           "--drain-timeout", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # once the socket listens, before the model loads
        match = re.search(r"(http://\S+)/healthz", line)
        assert match, line
        http_url = match.group(1)
        ws_url = http_url.replace("http://", "ws://") + "/v1/listen"

        answers = []
        deadline = time.monotonic() + 120
        while not answers or answers[-1][0] != 200:  # the load balancer's health check
            announced = bool(select.select([proc.stdout], [], [], 0)[0])  # the stdout line means ready
            answers.append(healthz(http_url))
            assert answers[-1][0] == 200 or (answers[-1] == (503, {"status": "loading"}) and not announced), answers[-1]
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        assert answers[0] == (503, {"status": "loading"})  # it answered while the model was loading
        assert answers[-1][1]["status"] == "ok" and answers[-1][1]["model"] == base_model_dir.name
        assert proc.stdout.readline().startswith(f"specscribe: serving {http_url}/")

        async def scenario():
            sigterm_at: list[float] = []
            sent = asyncio.Event()

            def on_message(message: dict) -> None:
                if not sigterm_at and message["sent_audio"] >= 3.0:  # mid-stream: 3 of JFK's 11 s sent
                    proc.send_signal(signal.SIGTERM)
                    sigterm_at.append(message["received_at"])
                    sent.set()

            request = StreamRequest(url=ws_url, language="en", speed=2.0, tail_silence=1.0)
            stream = asyncio.create_task(stream_audio(jfk, request, on_message))
            signalled = asyncio.create_task(sent.wait())
            await asyncio.wait({stream, signalled}, return_when=asyncio.FIRST_COMPLETED)
            assert signalled.done() and not stream.done(), "the stream ended before the SIGTERM"
            status = await asyncio.to_thread(healthz, http_url)
            for _ in range(50):  # the signal is handled asynchronously in the server
                if status[1]["status"] != "ok":
                    break
                await asyncio.sleep(0.1)
                status = await asyncio.to_thread(healthz, http_url)
            async with websockets.connect(ws_url) as ws:
                busy = json.loads(await ws.recv())
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
            assert not stream.done()  # the open stream outlived all of that
            return status, busy, ws.close_code, sigterm_at[0], await stream

        status, busy, busy_code, sigterm_at, result = asyncio.run(scenario())
        assert status[0] == 503 and status[1]["status"] == "draining" and status[1]["sessions"] == 1
        assert busy["type"] == "busy" and busy["reason"] == "draining" and busy_code == 1013
        assert result.close_code == 1000 and not result.errors
        assert result.messages[-1]["type"] == "stats" and result.messages[-1]["reason"] == "close"
        assert any(f["received_at"] > sigterm_at for f in result.finals)  # finals kept coming after the SIGTERM
        assert round(wer(JFK_TEXT, result.text) * JFK_WORDS) == 0, result.text
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
