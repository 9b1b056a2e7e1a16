"""The /v1/listen WebSocket protocol: message parsing and validation, server messages, close codes.

docs/protocol.md is the prose version of this module; docs/schemas/*.json hold the JSON schemas
(tests check that the messages built here validate against them).

Client -> server: one ``config`` text frame first, then binary audio frames and the control
messages ``finalize``, ``close`` and ``keepalive``. Server -> client: ``ready``, the caption events
(``speech_start``, ``speech_end``, ``partial``, ``final``, ``translation``, ``stats``), ``error``
and ``busy``. Every parse error is a ``ProtocolError`` carrying a stable ``code`` and a one-line
message; nothing here raises anything else on any input.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np

PROTOCOL_VERSION = 1
ENCODINGS = {"pcm_s16le": np.dtype("<i2"), "pcm_f32le": np.dtype("<f4")}
TASKS = ("transcribe", "translate")
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8_000, 192_000
MAX_CHANNELS = 8
MAX_TEXT_FRAME = 4096  # bytes: no control or config message is longer
CONTROL_TYPES = ("finalize", "close", "keepalive")
MAX_BEAM = 8  # beam_size, alternatives (and REST's best_of, n_best): each is a row of every target pass
MAX_HOTWORDS = 500  # characters


class CloseCode:
    """WebSocket close codes the server uses (docs/protocol.md lists them)."""

    NORMAL = 1000  # after a `close` message: every final has been sent
    GOING_AWAY = 1001  # the server is draining (SIGTERM): finals flushed, reconnect (to another replica)
    MESSAGE_TOO_BIG = 1009  # a frame over the frame limit
    INTERNAL_ERROR = 1011  # a server fault (logged server-side; no details sent)
    TRY_AGAIN_LATER = 1013  # busy (max_clients, overloaded, loading, draining), or a stream fell max_backlog_seconds behind
    PROTOCOL_ERROR = 4000  # the first frame is not a valid config message
    INVALID_CONFIG = 4002  # config values out of range (sample rate, encoding, ...)
    IDLE_TIMEOUT = 4008  # no frame from the client for idle_timeout seconds
    SESSION_LIMIT = 4009  # max session length reached (finals are flushed first)
    SLOW_CLIENT = 4010  # the client did not read its events; outgoing buffer full


class ErrorCode:
    """Stable `code` strings of `error` messages."""

    PROTOCOL = "protocol_error"
    MALFORMED_JSON = "malformed_json"
    UNKNOWN_TYPE = "unknown_type"
    INVALID_CONFIG = "invalid_config"
    BAD_AUDIO = "bad_audio_frame"
    FRAME_TOO_BIG = "frame_too_big"
    IDLE_TIMEOUT = "idle_timeout"
    SESSION_LIMIT = "session_limit"
    INTERNAL = "internal_error"
    OVERLOADED = "server_overloaded"


class ProtocolError(Exception):
    """A client message the server cannot accept. Attributes: code (ErrorCode), message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ClientConfig:
    """The client's first message.

    Attributes:
        sample_rate: Hz of the audio frames (8000 ... 192000).
        encoding: "pcm_s16le" or "pcm_f32le" (little-endian, interleaved when channels > 1).
        channels: interleaved channels (1 ... 8); the server averages them to mono.
        language: ISO code such as "en", or None to detect it.
        task: "transcribe" or "translate" (into English) for the main captions.
        translate: also send an English `translation` after each final.
        interim_results: send `partial` events.
        beam_size: beam search width of the session's decodes (1: greedy).
        alternatives: `final` events carry this many alternative texts, best first (0 or 1: none);
            the decodes then use a beam of at least this width.
        hotwords: words to favour (faster-whisper's hotwords), "" for none.
        languages: when the language is detected, the codes it may be (empty: any).
    """

    sample_rate: int = 16_000
    encoding: str = "pcm_s16le"
    channels: int = 1
    language: str | None = None
    task: Literal["transcribe", "translate"] = "transcribe"
    translate: bool = False
    interim_results: bool = True
    beam_size: int = 1
    alternatives: int = 0
    hotwords: str = ""
    languages: tuple[str, ...] = ()

    @property
    def bytes_per_frame(self) -> int:
        """Bytes of one interleaved sample frame (all channels)."""
        return ENCODINGS[self.encoding].itemsize * self.channels

    def seconds(self, n_bytes: int) -> float:
        return n_bytes / (self.bytes_per_frame * self.sample_rate)


@dataclass(frozen=True)
class Control:
    """A control message. Attributes: type ("finalize", "close" or "keepalive")."""

    type: Literal["finalize", "close", "keepalive"]


Message = Union[ClientConfig, Control]

_LANGUAGE = re.compile(r"[A-Za-z]{2,8}(-[A-Za-z]+)?")
_CONFIG_KEYS = {"type", "sample_rate", "encoding", "channels", "language", "task", "translate", "interim_results",
                "beam_size", "alternatives", "hotwords", "languages"}
MAX_LANGUAGES = 16


def parse_text(text: str | bytes, *, expect_config: bool, languages: frozenset[str] | None = None) -> Message:
    """Parse one client text frame.

    expect_config: True for the first frame (must be config); False afterwards (a control message;
    a second config is an error). languages: the codes the model knows (None: any well-formed code).
    Raises ProtocolError and nothing else.
    """
    if len(text) > MAX_TEXT_FRAME:
        raise ProtocolError(ErrorCode.FRAME_TOO_BIG, f"text frames are at most {MAX_TEXT_FRAME} bytes")
    try:
        msg = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ProtocolError(ErrorCode.MALFORMED_JSON, "text frame is not valid JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError(ErrorCode.PROTOCOL, "a message must be a JSON object with a \"type\"")
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.PROTOCOL, "a message must have a string \"type\"")
    if expect_config:
        if kind != "config":
            raise ProtocolError(ErrorCode.PROTOCOL, f"the first message must be config, got {_short(kind)}")
        return parse_config(msg, languages)
    if kind == "config":
        raise ProtocolError(ErrorCode.PROTOCOL, "config was already given; open a new connection to change it")
    if kind not in CONTROL_TYPES:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {_short(kind)}; expected one of {', '.join(CONTROL_TYPES)}")
    return Control(kind)  # type: ignore[arg-type]


def parse_config(msg: dict[str, Any], languages: frozenset[str] | None = None) -> ClientConfig:
    """Validate a config object (already JSON-decoded). Raises ProtocolError(INVALID_CONFIG)."""
    unknown = sorted(set(msg) - _CONFIG_KEYS)
    if unknown:
        raise _bad_config(f"unknown config field {_short(unknown[0])}")
    rate = msg.get("sample_rate", 16_000)
    if isinstance(rate, float) and rate.is_integer():
        rate = int(rate)
    if not _is_int(rate) or not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise _bad_config(f"sample_rate must be an integer from {MIN_SAMPLE_RATE} to {MAX_SAMPLE_RATE}, got {_short(rate)}")
    encoding = msg.get("encoding", "pcm_s16le")
    if not isinstance(encoding, str) or encoding not in ENCODINGS:
        raise _bad_config(f"encoding must be one of {', '.join(ENCODINGS)}, got {_short(encoding)}")
    channels = msg.get("channels", 1)
    if not _is_int(channels) or not 1 <= channels <= MAX_CHANNELS:
        raise _bad_config(f"channels must be an integer from 1 to {MAX_CHANNELS}, got {_short(channels)}")
    language = msg.get("language")
    if language in ("", "auto"):
        language = None
    if language is not None and not (isinstance(language, str) and len(language) <= 16 and _LANGUAGE.fullmatch(language)):
        raise _bad_config(f"language must be an ISO code such as \"en\", \"auto\" or null, got {_short(language)}")
    if language is not None and languages is not None and language.lower() not in languages:
        raise _bad_config(f"language {_short(language)} is not one the model knows")
    task = msg.get("task", "transcribe")
    if not isinstance(task, str) or task not in TASKS:
        raise _bad_config(f"task must be transcribe or translate, got {_short(task)}")
    flags = {}
    for key, default in (("translate", False), ("interim_results", True)):
        value = msg.get(key, default)
        if not isinstance(value, bool):
            raise _bad_config(f"{key} must be true or false, got {_short(value)}")
        flags[key] = value
    for key, low in (("beam_size", 1), ("alternatives", 0)):
        value = msg.get(key, low)
        if isinstance(value, float) and value.is_integer():  # JSON Schema's integers include 2.0
            value = int(value)
        if not _is_int(value) or not low <= value <= MAX_BEAM:
            raise _bad_config(f"{key} must be an integer from {low} to {MAX_BEAM}, got {_short(value)}")
        flags[key] = value
    hotwords = msg.get("hotwords", "")
    if not isinstance(hotwords, str) or len(hotwords) > MAX_HOTWORDS:
        raise _bad_config(f"hotwords must be a string of at most {MAX_HOTWORDS} characters")
    allowed = msg.get("languages", [])
    if not isinstance(allowed, list) or len(allowed) > MAX_LANGUAGES or not all(
        isinstance(c, str) and len(c) <= 16 and _LANGUAGE.fullmatch(c) for c in allowed
    ):
        raise _bad_config(f"languages must be a list of at most {MAX_LANGUAGES} ISO codes such as [\"en\", \"de\"]")
    allowed = tuple(dict.fromkeys(c.lower() for c in allowed))
    unknown = [c for c in allowed if languages is not None and c not in languages]
    if unknown:
        raise _bad_config(f"language {_short(unknown[0])} is not one the model knows")
    return ClientConfig(
        sample_rate=int(rate),
        encoding=encoding,
        channels=int(channels),
        language=language.lower() if language else None,
        task=task,
        hotwords=hotwords.strip(),
        languages=allowed,
        **flags,
    )


def decode_audio(data: bytes, config: ClientConfig) -> np.ndarray:
    """A binary frame -> interleaved samples (n_frames * channels,), int16 or float32.

    Raises ProtocolError(BAD_AUDIO) unless the frame holds whole sample frames of finite values.
    """
    width = config.bytes_per_frame
    if len(data) % width:
        raise ProtocolError(
            ErrorCode.BAD_AUDIO,
            f"audio frame of {len(data)} bytes is not a whole number of {width}-byte sample frames "
            f"({config.encoding}, {config.channels} channel(s)); the frame was dropped",
        )
    samples = np.frombuffer(data, dtype=ENCODINGS[config.encoding])
    if samples.dtype.kind == "f":
        if not np.isfinite(samples).all():
            raise ProtocolError(ErrorCode.BAD_AUDIO, "pcm_f32le frame holds NaN or infinite samples; the frame was dropped")
        samples = np.clip(samples, -1.0, 1.0).astype(np.float32)
    return samples.astype(np.int16) if samples.dtype.kind == "i" else samples


# ---- server -> client messages ---------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Per-server limits announced in `ready`.

    Attributes:
        max_clients: concurrent sessions; beyond it a client gets `busy` and close 1013.
        max_frame_bytes: largest binary frame; larger closes with 1009.
        max_session_seconds: longest session, in audio seconds and in wall seconds.
        idle_timeout: seconds without any client frame before close 4008.
        max_outgoing: server messages buffered for a client that does not read, then close 4010.
        max_backlog_seconds: audio received but not yet processed; beyond it the stream is closed with
            `server_overloaded` and 1013 (the model cannot keep up with real time).
    """

    max_clients: int = 32
    max_frame_bytes: int = 1 << 20
    max_session_seconds: float = 3600.0
    idle_timeout: float = 30.0
    max_outgoing: int = 256
    max_backlog_seconds: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_clients": self.max_clients,
            "max_frame_bytes": self.max_frame_bytes,
            "max_session_seconds": self.max_session_seconds,
            "idle_timeout": self.idle_timeout,
        }


def ready_message(session_id: str, model: str, engine: str, config: ClientConfig, limits: Limits) -> dict[str, Any]:
    return {
        "type": "ready",
        "protocol": PROTOCOL_VERSION,
        "session_id": session_id,
        "model": model,
        "engine": engine,
        "config": {
            "sample_rate": config.sample_rate,
            "encoding": config.encoding,
            "channels": config.channels,
            "language": config.language,
            "task": config.task,
            "translate": config.translate,
            "interim_results": config.interim_results,
            "beam_size": config.beam_size,
            "alternatives": config.alternatives,
            "hotwords": config.hotwords,
            "languages": list(config.languages),
        },
        "limits": limits.to_dict(),
    }


def error_message(code: str, message: str, *, fatal: bool) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, "fatal": fatal}


BUSY_REASONS = {  # `busy` reason -> its message; every one is followed by close 1013
    "max_clients": "the server is serving its maximum of {max_clients} sessions; try again later",
    "overloaded": "the server's model is at its limit (load level 3); try again later",
    "loading": "the server is still loading its model; try again shortly",
    "draining": "the server is shutting down; connect again (a load balancer sends you to another replica)",
}


def busy_message(max_clients: int, reason: str = "max_clients") -> dict[str, Any]:
    """`busy`: no new session now, for `reason` (a key of BUSY_REASONS): the server has max_clients sessions,
    its model is at its limit, it is still loading its model, or it is draining before it exits."""
    message = BUSY_REASONS[reason].format(max_clients=max_clients)
    return {"type": "busy", "message": message, "max_clients": max_clients, "reason": reason}


def dumps(message: dict[str, Any]) -> str:
    """A server message as JSON text. A figure that is NaN or infinite (a model fault: a word's probability out of
    NaN logits) goes out as null rather than as invalid JSON or a fault that would end the session; anything else
    that JSON cannot hold raises (TypeError), a server fault."""
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:  # non-finite floats: the rare path, so the common one walks nothing
        return json.dumps(_finite(message), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    """value with every non-finite float (numpy's float64 included) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _bad_config(message: str) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_CONFIG, message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any, limit: int = 40) -> str:
    """repr of a client value for an error message, cut short (never echo a huge input)."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(type(value).__name__)
    if isinstance(value, float) and not math.isfinite(value):
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
