"""A /v1/listen client: stream float32 16 kHz audio (a file) at real-time pace and collect the events.

Used by `specscribe stream`, scripts/bench_server.py and the tests. Sending and receiving run as two
tasks, so events arrive while audio is still being sent. Each received message gets `received_at`
(seconds since the first audio frame) and `sent_audio` (seconds of audio sent when it arrived).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class StreamRequest:
    """One client stream.

    Attributes:
        url: ws://host:port/v1/listen (an api_key query parameter may be in it).
        language: ISO code or None to detect.
        task: "transcribe" or "translate".
        translate: ask for translation events.
        interim_results: ask for partial events.
        speed: 1.0 = real time; 0 = as fast as possible.
        chunk_seconds: seconds of audio per frame.
        api_key: sent as `Authorization: Bearer`.
        tail_silence: seconds of silence sent after the audio (lets the VAD close the last utterance).
    """

    url: str
    language: str | None = None
    task: str = "transcribe"
    translate: bool = False
    interim_results: bool = True
    speed: float = 1.0
    chunk_seconds: float = 0.1
    api_key: str | None = None
    tail_silence: float = 0.0


@dataclass
class StreamResult:
    """What one stream got back. Attributes: messages (in order), close_code, finals text, elapsed seconds."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    elapsed: float = 0.0

    @property
    def finals(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] == "final"]

    @property
    def text(self) -> str:
        return " ".join(m["text"].strip() for m in self.finals).strip()

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["type"] in ("error", "busy")]


async def stream_audio(
    audio: np.ndarray,
    request: StreamRequest,
    on_message: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
) -> StreamResult:
    """Stream audio (float32 mono 16 kHz, (n,)) as pcm_s16le, send `close`, read until the server closes.

    Once `stop` is set no more audio is sent: `close` goes out at once and the events of the audio already sent
    (its finals) are still read until the server closes (`specscribe stream`'s Ctrl-C)."""
    import websockets

    stop = stop if stop is not None else asyncio.Event()  # never set: every frame goes out
    if request.tail_silence > 0:
        audio = np.concatenate([audio, np.zeros(int(request.tail_silence * SAMPLE_RATE), dtype=np.float32)])
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    step = max(2, int(request.chunk_seconds * SAMPLE_RATE) * 2)
    headers = {"Authorization": f"Bearer {request.api_key}"} if request.api_key else None
    result = StreamResult()
    config = {
        "type": "config", "sample_rate": SAMPLE_RATE, "encoding": "pcm_s16le", "channels": 1,
        "language": request.language, "task": request.task, "translate": request.translate,
        "interim_results": request.interim_results,
    }
    sent = [0]  # bytes of audio sent
    t0 = [time.monotonic()]

    async with websockets.connect(request.url, additional_headers=headers, max_size=2**22) as ws:
        try:
            await ws.send(json.dumps(config))
        except websockets.ConnectionClosed:  # refused at once (`busy`): what it sent is still read below
            pass

        async def receive() -> None:
            try:
                async for text in ws:
                    msg = json.loads(text)
                    msg["received_at"] = round(time.monotonic() - t0[0], 3)
                    msg["sent_audio"] = round(sent[0] / 2 / SAMPLE_RATE, 3)
                    result.messages.append(msg)
                    if on_message is not None:
                        on_message(msg)
            except websockets.ConnectionClosed:
                pass

        receiver = asyncio.create_task(receive())
        t0[0] = time.monotonic()
        try:
            for offset in range(0, len(pcm), step):
                if request.speed > 0:  # pace: frame k leaves at k * chunk / speed
                    due = t0[0] + (offset / 2 / SAMPLE_RATE) / request.speed
                    delay = due - time.monotonic()
                    if delay > 0:  # a stop ends the wait at once
                        with contextlib.suppress(asyncio.TimeoutError):
                            await asyncio.wait_for(stop.wait(), delay)
                if receiver.done() or stop.is_set():  # the server closed early, or stopped
                    break
                await ws.send(pcm[offset : offset + step])
                sent[0] = offset + len(pcm[offset : offset + step])
            if not receiver.done():
                await ws.send(json.dumps({"type": "close"}))
        except websockets.ConnectionClosed:
            pass
        await receiver
        result.close_code = ws.close_code
    result.elapsed = time.monotonic() - t0[0]
    return result
