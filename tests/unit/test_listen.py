"""The /v1/listen server over real loopback sockets, with a fake session and transcriber (no weights).

Covers every message type, finalize/close semantics, the limits, bad input (each with its documented
error and close code), concurrent clients without mix-ups, and that sessions are released afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import json
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import websockets
from web_fakes import FakeSession, FakeTranscriber, ServerThread, to_pcm16, utterance

from specscribe.web import protocol as P
from specscribe.web.security import SecurityOptions
from specscribe.web.server import ServerOptions, create_app

SERVER_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs/schemas/server-messages.schema.json").read_text())
LIMITS = P.Limits(max_clients=4, max_frame_bytes=64 * 1024, max_session_seconds=60, idle_timeout=3.0, max_outgoing=64)


def start(limits=LIMITS, security=SecurityOptions(), pad_partials=0, delay=0.0) -> ServerThread:
    options = ServerOptions(limits=limits, security=security)
    app = create_app(FakeTranscriber(delay), options, lambda s, o, i: FakeSession(s, o, i, pad_partials=pad_partials))
    return ServerThread(app, options)


@pytest.fixture(scope="module")
def server():
    with start() as srv:
        yield srv


def config(**kw) -> str:
    return json.dumps({"type": "config", "sample_rate": 16000, **kw})


def chunks(audio: np.ndarray, size: int = 3200) -> list[bytes]:
    pcm = to_pcm16(audio)
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


async def session(url: str, frames: list, *, headers=None, open_timeout=10) -> tuple[list[dict], int | None]:
    """Send frames (str or bytes) in order, read every message until the server closes."""
    messages = []
    async with websockets.connect(url, additional_headers=headers, open_timeout=open_timeout) as ws:
        for frame in frames:
            await ws.send(frame)
        try:
            async with asyncio.timeout(30):
                async for text in ws:
                    messages.append(json.loads(text))
        except websockets.ConnectionClosed:
            pass
        return messages, ws.close_code


def run(coro):
    return asyncio.run(coro)


def types(messages):
    return [m["type"] for m in messages]


def health(srv) -> dict:
    return json.loads(urllib.request.urlopen(srv.http_url + "/healthz", timeout=5).read())


def test_every_message_type_and_close_semantics(server):
    audio = np.concatenate([utterance([1, 2, 3]), utterance([4, 5], gap_s=0.0)])  # the 2nd is cut off by close
    messages, code = run(session(server.ws_url, [config(translate=True), *chunks(audio), '{"type":"close"}']))
    for m in messages:
        jsonschema.validate(m, SERVER_SCHEMA)
    kinds = types(messages)
    assert kinds[0] == "ready" and kinds[-1] == "stats" and messages[-1]["reason"] == "close"
    assert {"speech_start", "speech_end", "partial", "final", "translation", "line"} <= set(kinds)
    finals = [m for m in messages if m["type"] == "final"]
    assert [f["text"] for f in finals] == ["w1 w2 w3", "w4 w5"]  # the unfinished utterance is flushed
    assert [f["id"] for f in finals] == [0, 1]
    assert [m["text"] for m in messages if m["type"] == "translation"] == ["W1 W2 W3", "W4 W5"]
    assert code == P.CloseCode.NORMAL


def test_finalize_commits_and_the_session_goes_on(server):
    first, second = utterance([2, 2, 6], gap_s=0.0), utterance([7, 8], gap_s=0.0)
    frames = [config(), *chunks(first), '{"type":"finalize"}', '{"type":"keepalive"}', *chunks(second), '{"type":"close"}']
    messages, code = run(session(server.ws_url, frames))
    kinds = types(messages)
    i_fin = next(i for i, m in enumerate(messages) if m.get("reason") == "finalize")
    before = [m for m in messages[:i_fin] if m["type"] == "final"]
    after = [m for m in messages[i_fin:] if m["type"] == "final"]
    assert [f["text"] for f in before] == ["w2 w6"] and [f["text"] for f in after] == ["w7 w8"]
    assert after[0]["id"] == 1  # numbering continues across a finalize
    assert [m["id"] for m in messages if m["type"] == "line"] == [0, 1]  # so does the lines' (pipeline/lines.py)
    assert after[0]["start"] >= first.size / 16000 - 0.05  # and so does the timeline
    assert kinds[-1] == "stats" and code == 1000


@pytest.mark.parametrize(
    "first, error_code, close_code",
    [
        ('{"type":"finalize"}', "protocol_error", P.CloseCode.PROTOCOL_ERROR),  # text before config
        ("{not json", "malformed_json", P.CloseCode.PROTOCOL_ERROR),
        (b"\x00\x01" * 100, "protocol_error", P.CloseCode.PROTOCOL_ERROR),  # audio before config
        ('{"type":"config","sample_rate":1000000}', "invalid_config", P.CloseCode.INVALID_CONFIG),
        ('{"type":"config","encoding":"opus"}', "invalid_config", P.CloseCode.INVALID_CONFIG),
        ('{"type":"config","language":"xx"}', "invalid_config", P.CloseCode.INVALID_CONFIG),  # not a Whisper language
    ],
)
def test_bad_first_frame_gets_fatal_error_and_close_code(server, first, error_code, close_code):
    messages, code = run(session(server.ws_url, [first]))
    assert messages == [{"type": "error", "code": error_code, "message": messages[0]["message"], "fatal": True}]
    assert code == close_code


def test_bad_messages_after_config_are_reported_and_nothing_is_lost(server):
    audio = chunks(utterance([3, 4]))
    frames = [config(), audio[0], "{oops", '{"type":"explode"}', b"\x01\x02\x03", *audio[1:], '{"type":"close"}']
    messages, code = run(session(server.ws_url, frames))
    errors = [m for m in messages if m["type"] == "error"]
    assert [e["code"] for e in errors] == ["malformed_json", "unknown_type", "bad_audio_frame"]
    assert not any(e["fatal"] for e in errors)
    assert [m["text"] for m in messages if m["type"] == "final"] == ["w3 w4"]
    assert code == 1000


def test_oversized_frame_closes_1009_and_server_keeps_serving(server):
    big = b"\x00" * (LIMITS.max_frame_bytes + 2)
    with pytest.raises(websockets.ConnectionClosed) as info:
        run(_send_then_recv_forever(server.ws_url, [config(), big]))
    assert info.value.rcvd is not None and info.value.rcvd.code == P.CloseCode.MESSAGE_TOO_BIG
    messages, code = run(session(server.ws_url, [config(), *chunks(utterance([5])), '{"type":"close"}']))
    assert [m["text"] for m in messages if m["type"] == "final"] == ["w5"] and code == 1000


async def _send_then_recv_forever(url, frames):
    async with websockets.connect(url) as ws:
        for frame in frames:
            await ws.send(frame)
        while True:
            await ws.recv()


def test_abrupt_disconnect_mid_utterance_releases_the_session(server):
    async def vanish():
        ws = await websockets.connect(server.ws_url)
        await ws.send(config())
        await ws.recv()
        for frame in chunks(utterance([1, 2, 3, 4], gap_s=0.0)):
            await ws.send(frame)
        ws.transport.abort()  # no close frame, mid-utterance

    run(vanish())
    messages, code = run(session(server.ws_url, [config(), *chunks(utterance([9])), '{"type":"close"}']))
    assert [m["text"] for m in messages if m["type"] == "final"] == ["w9"] and code == 1000
    _assert_released(server)


def test_concurrent_clients_get_their_own_transcripts(server):
    plans = {i: [[1 + i, 2 + i], [7 - i, 3]] for i in range(4)}

    async def client(i):
        audio = np.concatenate([utterance(levels) for levels in plans[i]])
        frames = [config(), *chunks(audio, 1600 + 320 * i), '{"type":"close"}']
        return await session(server.ws_url, frames)

    async def main():
        return await asyncio.gather(*(client(i) for i in plans))

    for i, (messages, code) in enumerate(run(main())):
        expected = [" ".join(f"w{lv}" for lv in levels) for levels in plans[i]]
        assert [m["text"] for m in messages if m["type"] == "final"] == expected, i
        assert code == 1000


def test_the_stream_client_reports_a_full_servers_busy_rather_than_raising():
    """The server answers `busy` and closes 1013 right after the handshake, often before the client's config
    frame goes out: web/client.stream_audio (`specscribe stream`, the benchmarks) must still return the busy
    message, not raise ConnectionClosedError from sending the config."""
    from specscribe.web.client import StreamRequest, stream_audio

    with start(limits=replace(LIMITS, max_clients=1)) as srv:
        async def main():
            async with websockets.connect(srv.ws_url) as first:
                await first.send(config())
                assert json.loads(await first.recv())["type"] == "ready"
                request = StreamRequest(url=srv.ws_url, language="en", speed=0)
                results = [await stream_audio(np.zeros(1600, np.float32), request) for _ in range(5)]
                await first.send('{"type":"close"}')
                return results

        for result in run(main()):
            assert [m["type"] for m in result.errors] == ["busy"] and result.close_code == P.CloseCode.TRY_AGAIN_LATER


def test_busy_beyond_max_clients():
    with start(limits=replace(LIMITS, max_clients=1)) as srv:
        async def main():
            async with websockets.connect(srv.ws_url) as first:
                await first.send(config())
                assert json.loads(await first.recv())["type"] == "ready"
                messages, code = await session(srv.ws_url, [])
                await first.send('{"type":"close"}')
                return messages, code

        messages, code = run(main())
        assert types(messages) == ["busy"] and messages[0]["max_clients"] == 1
        assert code == P.CloseCode.TRY_AGAIN_LATER
        assert types(run(session(srv.ws_url, [config(), '{"type":"close"}']))[0])[0] == "ready"  # slot freed


def test_busy_when_the_model_is_at_its_limit_and_streaming_sessions_keep_their_finals(monkeypatch):
    """Load level 3 refuses new sessions (busy, reason overloaded); a session already in keeps all its finals."""
    from specscribe.pipeline.load import Load
    from specscribe.pipeline.scheduler import ModelScheduler

    load = [Load()]
    monkeypatch.setattr(ModelScheduler, "load", property(lambda self: load[0]))
    with start() as srv:
        async def main():
            async with websockets.connect(srv.ws_url) as first:
                await first.send(config())
                assert json.loads(await first.recv())["type"] == "ready"
                load[0] = Load(3, 4.0)
                refused = await session(srv.ws_url, [])  # busy comes at once, before any config is read
                assert health(srv)["load"] == {"level": 3, "lag_s": 4.0, "update_factor": 8, "keep_context": False,
                                              "hold_unsure": False}
                for frame in chunks(np.concatenate([utterance([2, 3]), utterance([5])])):
                    await first.send(frame)
                await first.send('{"type":"close"}')
                kept = [json.loads(m) async for m in first]
                return refused, kept

        (messages, code), kept = run(main())
        assert types(messages) == ["busy"] and messages[0]["reason"] == "overloaded"
        assert code == P.CloseCode.TRY_AGAIN_LATER
        jsonschema.validate(messages[0], SERVER_SCHEMA)
        assert [m["text"] for m in kept if m["type"] == "final"] == ["w2 w3", "w5"]
        assert kept[-1]["type"] == "stats" and kept[-1]["stats"]["load"]["level"] == 3
        load[0] = Load()
        assert types(run(session(srv.ws_url, [config(), '{"type":"close"}']))[0])[0] == "ready"  # admitted again


def test_idle_timeout_and_session_limit():
    with start(limits=replace(LIMITS, idle_timeout=0.6, max_session_seconds=1.5)) as srv:
        messages, code = run(session(srv.ws_url, [config(), *chunks(utterance([4], gap_s=0.0))]))
        assert code == P.CloseCode.IDLE_TIMEOUT
        assert [m["text"] for m in messages if m["type"] == "final"] == ["w4"]  # flushed before closing
        assert messages[-1] == {"type": "error", "code": "idle_timeout", "message": messages[-1]["message"], "fatal": True}

        long_audio = np.concatenate([utterance([2, 3]), utterance([5, 6])])  # 2.5 s > 1.5 s
        messages, code = run(session(srv.ws_url, [config(), *chunks(long_audio)]))
        assert code == P.CloseCode.SESSION_LIMIT
        assert messages[-1]["code"] == "session_limit"
        assert [m["text"] for m in messages if m["type"] == "final"][0] == "w2 w3"
        _assert_released(srv)


def test_a_stream_the_model_cannot_keep_up_with_is_closed_as_overloaded():
    with start(limits=replace(LIMITS, max_backlog_seconds=1.0), delay=0.05) as srv:
        audio = np.concatenate([utterance([lv % 9 + 1] * 2, gap_s=0.1) for lv in range(20)])  # 11 s, sent at once
        messages, code = run(session(srv.ws_url, [config(), *chunks(audio)]))
        assert code == P.CloseCode.TRY_AGAIN_LATER
        assert messages[-1]["code"] == "server_overloaded" and messages[-1]["fatal"]
        _assert_released(srv)


def test_a_waiting_update_is_withdrawn_once_newer_audio_piles_up_behind_it():
    """More than min_silence of audio waiting behind a session's model job may hold its utterance's end: the
    connection asks the session to take back an update that has not started (pipeline/scheduler.py withdraw)."""
    with start(delay=0.05) as srv:
        before, heard = FakeSession.withdrawals, FakeSession.looked_ahead
        audio = np.concatenate([utterance([lv % 9 + 1] * 2, gap_s=0.1) for lv in range(10)])  # 5.5 s, sent at once
        messages, code = run(session(srv.ws_url, [config(), *chunks(audio), json.dumps({"type": "close"})]))
        assert code == 1000 and "final" in types(messages)
        assert FakeSession.withdrawals > before
        assert FakeSession.looked_ahead - heard == audio.size  # every sample shown ahead, as it arrived

    with start() as srv:  # a model that keeps up: 0.2 s frames at real-time pace never pile up
        before = FakeSession.withdrawals

        async def paced():
            async with websockets.connect(srv.ws_url) as ws:
                await ws.send(config())
                for frame in chunks(utterance([3, 5], gap_s=0.4)):
                    await ws.send(frame)
                    await asyncio.sleep(0.2)
                await ws.send(json.dumps({"type": "close"}))
                return [json.loads(m) async for m in ws]

        assert "final" in types(run(paced()))
        assert FakeSession.withdrawals == before


def test_client_that_never_reads_is_dropped_without_hurting_others():
    with start(limits=replace(LIMITS, max_outgoing=8, max_session_seconds=600), pad_partials=60_000) as srv:
        async def stuck():
            ws = await websockets.connect(srv.ws_url, max_queue=1)
            await ws.send(config())
            audio = np.concatenate([utterance([lv % 9 + 1, (lv + 4) % 9 + 1], gap_s=0.0) for lv in range(400)])
            try:
                for frame in chunks(audio, 32000):
                    await ws.send(frame)
                    await asyncio.sleep(0)
                async with asyncio.timeout(20):  # the server must cut us off; we never read, only write
                    while True:
                        await ws.send('{"type":"keepalive"}')
                        await asyncio.sleep(0.1)
            except websockets.ConnectionClosed:
                pass
            return ws

        async def main():
            stuck_task = asyncio.create_task(stuck())
            normal = await session(srv.ws_url, [config(), *chunks(utterance([6, 1])), '{"type":"close"}'])
            ws = await stuck_task
            return normal, ws

        (messages, code), ws = run(main())
        assert [m["text"] for m in messages if m["type"] == "final"] == ["w6 w1"] and code == 1000
        assert ws.state is websockets.protocol.State.CLOSED
        _assert_released(srv)


def test_api_key_and_origin():
    with start(security=SecurityOptions(api_key="k3y")) as srv:
        with pytest.raises(websockets.InvalidStatus) as info:
            run(session(srv.ws_url, [config()]))
        assert info.value.response.status_code == 401
        for url, headers in ((srv.ws_url, {"Authorization": "Bearer k3y"}), (srv.ws_url + "?api_key=k3y", None)):
            messages, code = run(session(url, [config(), '{"type":"close"}'], headers=headers))
            assert types(messages)[0] == "ready" and code == 1000
        with pytest.raises(websockets.InvalidStatus) as info:
            run(session(srv.ws_url + "?api_key=k3y", [config()], headers={"Origin": "http://evil.example"}))
        assert info.value.response.status_code == 403


def test_static_page_health_and_no_path_traversal(server):
    page = urllib.request.urlopen(server.http_url + "/", timeout=5)
    assert b"<html" in page.read().lower() and page.headers["X-Content-Type-Options"] == "nosniff"
    assert urllib.request.urlopen(server.http_url + "/app.js", timeout=5).status == 200
    for path in ("/../pyproject.toml", "/..%2f..%2fpyproject.toml", "/%2e%2e/server.py", "/static/../../protocol.py",
                 "/..%5cserver.py", "/etc/passwd"):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(server.http_url + path, timeout=5)
        assert info.value.code == 404, path
    assert health(server)["status"] == "ok"


def _assert_released(srv) -> None:
    """No session state outlives its connection: slots back to 0 and every FakeSession collected."""
    for _ in range(100):
        gc.collect()
        if health(srv)["sessions"] == 0 and not any(s.scheduler is not None and s._t0 for s in list(FakeSession.live)):
            break
        import time

        time.sleep(0.05)  # connections finish closing on the server thread
    assert health(srv)["sessions"] == 0
    gc.collect()
    assert len(FakeSession.live) == 0, f"{len(FakeSession.live)} sessions still alive"


def test_search_fields_of_the_config_reach_the_session():
    made = []

    def factory(s, o, i):
        made.append(o)
        return FakeSession(s, o, i)

    options = ServerOptions(limits=LIMITS)
    with ServerThread(create_app(FakeTranscriber(), options, factory), options) as srv:
        cfg = config(alternatives=3, hotwords="Kubernetes")
        messages, code = run(session(srv.ws_url, [cfg, *chunks(utterance([1, 2])), '{"type":"close"}']))
        assert messages[0]["config"]["alternatives"] == 3 and messages[0]["config"]["beam_size"] == 1
        assert code == P.CloseCode.NORMAL
        messages, _ = run(session(srv.ws_url, [config(beam_size=5), '{"type":"close"}']))
    assert (made[0].beam_size, made[0].n_best, made[0].hotwords) == (3, 3, "Kubernetes")  # a beam of K for K alternatives
    assert (made[1].beam_size, made[1].n_best, made[1].hotwords) == (5, 1, "")


def _speech_up_to_the_end(rate: int = 8000) -> list:
    """config, then 0.5 s of one word ("w5") that runs to the last sample, in 0.1 s frames at `rate`."""
    pcm = to_pcm16(utterance([5], word_s=0.5, gap_s=0.0, rate=rate))
    return [config(sample_rate=rate), *[pcm[i : i + rate // 5] for i in range(0, len(pcm), rate // 5)]]


def test_finalize_flushes_the_resamplers_tail_into_the_session_it_ends(server):
    """soxr holds back the last samples it was given (1060 at 8 kHz). A finalize must flush them into the session
    it ends (its last word runs to 0.5 s), not leave them to start the next one (a spurious second "w5")."""
    messages, code = run(session(server.ws_url, [*_speech_up_to_the_end(), '{"type":"finalize"}', '{"type":"close"}']))
    finals = [(m["text"], m["end"]) for m in messages if m["type"] == "final"]
    assert finals == [("w5", 0.5)], finals
    reasons = [m.get("reason") for m in messages if m["type"] in ("final", "stats")]
    assert reasons == [None, "finalize", "close"] and code == 1000


@pytest.mark.parametrize("limits, close_code", [
    (replace(LIMITS, idle_timeout=0.6), P.CloseCode.IDLE_TIMEOUT),
    (replace(LIMITS, max_session_seconds=0.5), P.CloseCode.SESSION_LIMIT),  # reached by the last frame
])
def test_every_stop_flushes_the_resamplers_tail_first(limits, close_code):
    """docs/protocol.md: an idle timeout or the session limit flushes the finals first, the held-back tail too."""
    with start(limits=limits) as srv:
        messages, code = run(session(srv.ws_url, _speech_up_to_the_end()))
    assert [(m["text"], m["end"]) for m in messages if m["type"] == "final"] == [("w5", 0.5)]
    assert code == close_code


class _FaultySession(FakeSession):
    """With nan_words its finals carry a NaN word probability (as NaN logits would give); with bad_stats its
    finish() stats hold something JSON cannot (a set)."""

    def __init__(self, *args, nan_words: bool = False, bad_stats: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.nan_words, self.bad_stats = nan_words, bad_stats

    async def _commit(self):
        from specscribe.pipeline.types import Word

        nan = tuple if not self.nan_words else lambda words: tuple(Word(w.start, w.end, w.text, float("nan")) for w in words)
        return [replace(e, words=nan(e.words)) if e.type == "final" else e for e in await super()._commit()]

    async def finish(self):
        events = await super().finish()
        return [replace(e, stats={**e.stats, "bad": {1}}) if e.type == "stats" and self.bad_stats else e for e in events]


def test_a_nan_word_probability_goes_out_as_null_and_the_session_goes_on():
    options = ServerOptions(limits=LIMITS)
    app = create_app(FakeTranscriber(), options, lambda s, o, i: _FaultySession(s, o, i, nan_words=True))
    with ServerThread(app, options) as srv:
        audio = np.concatenate([utterance([1, 2, 3]), utterance([4, 5], gap_s=0.0)])
        messages, code = run(session(srv.ws_url, [config(), *chunks(audio), '{"type":"close"}']))
    finals = [m for m in messages if m["type"] == "final"]
    assert [f["text"] for f in finals] == ["w1 w2 w3", "w4 w5"] and code == P.CloseCode.NORMAL
    assert {w["probability"] for f in finals for w in f["words"]} == {None}
    assert messages[-1]["type"] == "stats"


def test_a_message_that_cannot_be_serialized_is_an_internal_error_not_a_disconnect(caplog):
    """The writer serializes outside its "client went away" handler: the fault is logged, the client gets
    internal_error and close 1011 (before, the session ended silently with 1006)."""
    options = ServerOptions(limits=LIMITS)
    app = create_app(FakeTranscriber(), options, lambda s, o, i: _FaultySession(s, o, i, bad_stats=True))
    with caplog.at_level("ERROR", logger="specscribe.web.listen"), ServerThread(app, options) as srv:
        messages, code = run(session(srv.ws_url, [config(), *chunks(utterance([3, 4])), '{"type":"close"}']))
    assert [m["text"] for m in messages if m["type"] == "final"] == ["w3 w4"]  # sent before the faulty stats
    last = messages[-1]
    assert (last["type"], last.get("code"), last.get("fatal")) == ("error", "internal_error", True), last
    assert code == P.CloseCode.INTERNAL_ERROR
    assert any("internal error" in r.getMessage() and r.exc_info for r in caplog.records)


def test_an_oversized_text_frame_is_dropped_after_config_and_fatal_with_1009_as_the_first_frame(server):
    """docs/protocol.md, Errors: a text frame over 4 KiB loses nothing once a session runs (non-fatal, dropped);
    as the first frame there is no session to keep, and it closes with 1009 like an oversized audio frame."""
    big = json.dumps({"type": "keepalive", "pad": "x" * P.MAX_TEXT_FRAME})
    audio = chunks(utterance([3, 4]))
    messages, code = run(session(server.ws_url, [config(), audio[0], big, *audio[1:], '{"type":"close"}']))
    errors = [(m["code"], m["fatal"]) for m in messages if m["type"] == "error"]
    assert errors == [("frame_too_big", False)]
    assert [m["text"] for m in messages if m["type"] == "final"] == ["w3 w4"] and code == 1000
    messages, code = run(session(server.ws_url, [json.dumps({"type": "config", "hotwords": "x" * P.MAX_TEXT_FRAME})]))
    assert [(m["code"], m["fatal"]) for m in messages] == [("frame_too_big", True)]
    assert code == P.CloseCode.MESSAGE_TOO_BIG
