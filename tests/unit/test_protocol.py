"""The /v1/listen message parser, audio frame decoding, server messages vs the JSON schemas, security."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscribe.pipeline.types import CaptionEvent, Word
from specscribe.web import protocol as P
from specscribe.web.security import SecurityOptions, key_ok, origin_ok

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
CLIENT_SCHEMA = json.loads((SCHEMAS / "client-messages.schema.json").read_text())
SERVER_SCHEMA = json.loads((SCHEMAS / "server-messages.schema.json").read_text())


def server_valid(message: dict) -> None:
    jsonschema.validate(json.loads(P.dumps(message)), SERVER_SCHEMA)


def test_full_config_round_trips_and_matches_schema():
    raw = {"type": "config", "sample_rate": 48000, "encoding": "pcm_f32le", "channels": 2, "language": "DE",
           "task": "translate", "translate": True, "interim_results": False}
    jsonschema.validate(raw, CLIENT_SCHEMA)
    cfg = P.parse_text(json.dumps(raw), expect_config=True)
    assert cfg == P.ClientConfig(48000, "pcm_f32le", 2, "de", "translate", True, False)
    assert cfg.bytes_per_frame == 8
    assert cfg.seconds(48000 * 8) == pytest.approx(1.0)


def test_search_fields_of_the_config():
    raw = {"type": "config", "beam_size": 4, "alternatives": 3, "hotwords": " Kubernetes, Dvořák "}
    jsonschema.validate(raw, CLIENT_SCHEMA)
    cfg = P.parse_text(json.dumps(raw), expect_config=True)
    assert (cfg.beam_size, cfg.alternatives, cfg.hotwords) == (4, 3, "Kubernetes, Dvořák")
    server_valid(P.ready_message("abc", "base", "spec", cfg, P.Limits()))
    raw = {"type": "config", "languages": ["EN", "de", "en"]}
    jsonschema.validate(raw, CLIENT_SCHEMA)
    assert P.parse_text(json.dumps(raw), expect_config=True).languages == ("en", "de")
    with pytest.raises(P.ProtocolError):
        P.parse_text(json.dumps(raw), expect_config=True, languages=frozenset({"en", "fr"}))  # de unknown
    for bad in ({"beam_size": 0}, {"beam_size": 9}, {"alternatives": -1}, {"alternatives": True},
                {"hotwords": 3}, {"hotwords": "x" * 501}, {"languages": "en"}, {"languages": ["english!"]},
                {"languages": ["en"] * 17}):
        with pytest.raises(P.ProtocolError) as info:
            P.parse_text(json.dumps({"type": "config", **bad}), expect_config=True)
        assert info.value.code == P.ErrorCode.INVALID_CONFIG


def test_config_defaults_and_auto_language():
    assert P.parse_text('{"type":"config"}', expect_config=True) == P.ClientConfig()
    assert P.parse_text('{"type":"config","language":"auto"}', expect_config=True).language is None
    assert P.parse_text('{"type":"config","sample_rate":16000.0}', expect_config=True).sample_rate == 16000


@pytest.mark.parametrize(
    "text, code",
    [
        ('{"type":"finalize"}', P.ErrorCode.PROTOCOL),  # control before config
        ("not json", P.ErrorCode.MALFORMED_JSON),
        ("[1,2]", P.ErrorCode.PROTOCOL),
        ('{"sample_rate":16000}', P.ErrorCode.PROTOCOL),
        ('{"type":"config","sample_rate":1234567}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","sample_rate":0}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","sample_rate":"16000"}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","sample_rate":true}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","sample_rate":16000.5}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","encoding":"mp3"}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","channels":0}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","language":"english!"}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","task":"summarize"}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","translate":"yes"}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","bogus":1}', P.ErrorCode.INVALID_CONFIG),
        ('{"type":"config","x":"' + "a" * 5000 + '"}', P.ErrorCode.FRAME_TOO_BIG),
    ],
)
def test_bad_first_frames(text, code):
    with pytest.raises(P.ProtocolError) as info:
        P.parse_text(text, expect_config=True)
    assert info.value.code == code
    assert "\n" not in info.value.message and len(info.value.message) < 200


@pytest.mark.parametrize("kind", ["finalize", "close", "keepalive"])
def test_controls_after_config(kind):
    msg = {"type": kind}
    jsonschema.validate(msg, CLIENT_SCHEMA)
    assert P.parse_text(json.dumps(msg), expect_config=False) == P.Control(kind)


@pytest.mark.parametrize(
    "text, code",
    [('{"type":"config"}', P.ErrorCode.PROTOCOL), ('{"type":"flush"}', P.ErrorCode.UNKNOWN_TYPE),
     ("{", P.ErrorCode.MALFORMED_JSON), ('{"type":3}', P.ErrorCode.PROTOCOL)],
)
def test_bad_controls(text, code):
    with pytest.raises(P.ProtocolError) as info:
        P.parse_text(text, expect_config=False)
    assert info.value.code == code


def test_decode_audio_pcm16_and_f32():
    s16 = P.ClientConfig(encoding="pcm_s16le", channels=2)
    data = np.array([1000, -1000, 32767, -32768], dtype="<i2").tobytes()
    out = P.decode_audio(data, s16)
    assert out.dtype == np.int16 and out.tolist() == [1000, -1000, 32767, -32768]
    f32 = P.ClientConfig(encoding="pcm_f32le")
    out = P.decode_audio(np.array([0.5, -2.0], dtype="<f4").tobytes(), f32)
    assert out.dtype == np.float32 and out.tolist() == [0.5, -1.0]  # clipped


@pytest.mark.parametrize("n_bytes, cfg", [(3, P.ClientConfig()), (6, P.ClientConfig(encoding="pcm_f32le")),
                                          (2, P.ClientConfig(channels=2))])
def test_decode_audio_rejects_partial_frames(n_bytes, cfg):
    with pytest.raises(P.ProtocolError) as info:
        P.decode_audio(b"\x01" * n_bytes, cfg)
    assert info.value.code == P.ErrorCode.BAD_AUDIO


def test_decode_audio_rejects_nan():
    with pytest.raises(P.ProtocolError):
        P.decode_audio(np.array([np.nan], dtype="<f4").tobytes(), P.ClientConfig(encoding="pcm_f32le"))


def test_every_server_message_matches_the_schema():
    cfg = P.ClientConfig()
    server_valid(P.ready_message("abc", "base", "spec", cfg, P.Limits()))
    server_valid(P.error_message(P.ErrorCode.BAD_AUDIO, "odd", fatal=False))
    server_valid(P.busy_message(4))
    words = (Word(0.0, 0.5, " ask", 0.9), Word(0.5, 0.9, " not", 0.8))
    events = [
        CaptionEvent("speech_start", 0.1, start=0.0),
        CaptionEvent("speech_end", 1.1, end=1.0),
        CaptionEvent("partial", 0.2, start=0.0, end=0.5, text="ask"),
        CaptionEvent("final", 0.3, id=0, start=0.0, end=0.9, text="ask not", words=words),
        CaptionEvent("final", 0.3, id=1, start=0.0, end=0.9, text="ask not", words=words, alternatives=("ask not", "asked not"),
                     language="en"),
        CaptionEvent("language", 0.35, language="en", probability=0.93, locked=True),
        CaptionEvent("translation", 0.4, id=0, start=0.0, end=0.9, text="ask not"),
        CaptionEvent("stats", 0.5, stats={"tokens": 3}),
    ]
    for event in events:
        server_valid(event.to_dict())
    with pytest.raises(jsonschema.ValidationError):  # the schema has teeth
        server_valid({"type": "final", "emitted_at": 0.1, "id": 0, "text": "x"})
    with pytest.raises(jsonschema.ValidationError):
        server_valid({"type": "error", "code": "made_up", "message": "m", "fatal": True})


@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)), st.booleans())
@settings(max_examples=300, deadline=None)
def test_fuzz_parser_raises_only_protocol_errors(text, expect_config):
    try:
        msg = P.parse_text(text, expect_config=expect_config)
    except P.ProtocolError as exc:
        assert exc.code in vars(P.ErrorCode).values()
        assert "\n" not in exc.message and len(exc.message) < 300
    else:
        assert isinstance(msg, P.ClientConfig if expect_config else P.Control)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(sorted(P._CONFIG_KEYS) + ["extra"]), _json_values, max_size=8))
@settings(max_examples=250, deadline=None)
def test_fuzz_config_objects_agree_with_the_schema(fields):
    """Any JSON object: the parser accepts it exactly when the schema does (type forced to config)."""
    fields = {**fields, "type": "config"}
    schema_ok = jsonschema.Draft202012Validator(CLIENT_SCHEMA["$defs"]["config"]).is_valid(fields)
    try:
        cfg = P.parse_text(json.dumps(fields), expect_config=True)
    except P.ProtocolError as exc:
        assert exc.code in (P.ErrorCode.INVALID_CONFIG, P.ErrorCode.FRAME_TOO_BIG), exc.message
        assert not schema_ok or exc.code == P.ErrorCode.FRAME_TOO_BIG, fields
    else:
        assert schema_ok or isinstance(fields.get("sample_rate"), float), fields
        assert P.MIN_SAMPLE_RATE <= cfg.sample_rate <= P.MAX_SAMPLE_RATE


@given(st.binary(max_size=64), st.sampled_from(list(P.ENCODINGS)), st.integers(1, 3))
@settings(max_examples=200, deadline=None)
def test_fuzz_audio_frames(data, encoding, channels):
    cfg = P.ClientConfig(encoding=encoding, channels=channels)
    try:
        out = P.decode_audio(data, cfg)
    except P.ProtocolError as exc:
        assert exc.code == P.ErrorCode.BAD_AUDIO
    else:
        assert out.size * out.itemsize == len(data) and (out.size % channels == 0)
        if out.dtype == np.float32:
            assert np.all(np.abs(out) <= 1.0)


def test_api_key_in_headers_or_query():
    sec = SecurityOptions(api_key="s3cret")
    assert key_ok(sec, {"authorization": "Bearer s3cret"}, {})
    assert key_ok(sec, {"x-api-key": "s3cret"}, {})
    assert key_ok(sec, {}, {"api_key": "s3cret"})
    assert not key_ok(sec, {"authorization": "Bearer wrong"}, {})
    assert not key_ok(sec, {}, {})
    assert not key_ok(sec, {"authorization": "Basic s3cret"}, {})
    assert key_ok(SecurityOptions(), {}, {})


def test_origin_rules():
    same = SecurityOptions()
    assert origin_ok(same, None, "127.0.0.1:8000")  # not a browser
    assert origin_ok(same, "http://127.0.0.1:8000", "127.0.0.1:8000")
    assert not origin_ok(same, "http://evil.example", "127.0.0.1:8000")
    listed = SecurityOptions(allowed_origins=("https://app.example",))
    assert origin_ok(listed, "https://app.example/", "x:1")
    assert not origin_ok(listed, "http://evil.example", "127.0.0.1:8000")
    assert origin_ok(SecurityOptions(allowed_origins=("*",)), "http://any", "h")


def test_allowed_origins_add_to_the_servers_own_page():
    """--allowed-origin lets other pages in; the server's own page stays allowed (docs/protocol.md, Access)."""
    listed = SecurityOptions(allowed_origins=("https://app.example",))
    assert origin_ok(listed, "http://127.0.0.1:8000", "127.0.0.1:8000")
    assert origin_ok(listed, "http://127.0.0.1:8000", "127.0.0.1:8000", loopback=True)
    assert origin_ok(listed, "http://192.168.1.5:8000", "192.168.1.5:8000")  # a LAN server's own page


def test_same_origin_on_a_loopback_server_needs_a_loopback_host():
    """DNS rebinding: evil.example resolved to 127.0.0.1 sends an Origin that matches its own Host. A server that
    listens on loopback only takes same origin from a loopback Host or a listed origin's host."""
    same, rebound = SecurityOptions(), ("http://evil.example:8000", "evil.example:8000")
    assert not origin_ok(same, *rebound, loopback=True)
    assert origin_ok(same, *rebound)  # on 0.0.0.0 or a LAN address, the Host names the server: LAN use works
    for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000", "localhost", "127.0.0.2:1"):
        scheme_host = f"http://{host}"
        assert origin_ok(same, scheme_host, host, loopback=True), host
    assert not origin_ok(same, "http://localhost.evil.example:8000", "localhost.evil.example:8000", loopback=True)
    proxied = SecurityOptions(allowed_origins=("https://captions.example",))  # behind a TLS proxy that keeps Host
    assert origin_ok(proxied, "http://captions.example", "captions.example", loopback=True)
    assert not origin_ok(proxied, *rebound, loopback=True)
    assert origin_ok(same, None, "evil.example:8000", loopback=True)  # no Origin: not a browser, not a rebinding page


def test_dumps_sends_non_finite_figures_as_null_and_raises_on_the_unserializable():
    """A NaN word probability (NaN logits) must not end a session (web/listen.py's writer); anything else JSON cannot
    hold is a server fault, raised for the connection's guard to report."""
    final = CaptionEvent(type="final", emitted_at=0.5, id=0, start=0.0, end=0.5, text="ask",
                         words=(Word(0.0, 0.5, " ask", float("nan")),))
    out = json.loads(P.dumps({**final.to_dict(), "stats": {"rtf": float("inf"), "n": [float("-inf"), 1.5]}}))
    assert out["words"][0]["probability"] is None and out["stats"] == {"rtf": None, "n": [None, 1.5]}
    assert out["text"] == "ask" and out["end"] == 0.5
    with pytest.raises(TypeError):
        P.dumps({"type": "stats", "stats": {"bad": {1, 2}}})
