"""OpenAI-compatible batch endpoints: POST /v1/audio/transcriptions and /v1/audio/translations.

Multipart form as in OpenAI's API: `file` (any audio or video PyAV reads), `model` (accepted and
ignored: the server transcribes with the model it loaded), `language`, `prompt`, `temperature`,
`response_format` (json | text | srt | vtt | verbose_json) and `timestamp_granularities[]`
(segment, word). Beyond OpenAI's fields, faster-whisper's: `beam_size`, `best_of`, `patience`,
`length_penalty`, `hotwords`, `multilingual` (true/false), and `n_best` (verbose_json segments then
carry `alternatives`). Errors use OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

The file goes through pipeline/longform.py in a worker thread. Its model calls are routed one by one
through the shared ModelScheduler (`_ScheduledTranscriber`), so a long upload takes turns with the
live streams instead of blocking them for its whole duration.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from specscribe.models.engines import Transcriber
from specscribe.pipeline.audio import AudioError, AudioTooLong, load_audio
from specscribe.pipeline.writers import alternatives_json
from specscribe.web.protocol import MAX_BEAM, MAX_HOTWORDS
from specscribe.web.replica import Lifecycle
from specscribe.web.security import key_ok, on_loopback, origin_ok

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
FORM_OVERHEAD = 65536  # bytes of multipart framing and text fields allowed on top of max_upload_bytes
REFUSALS = {  # Lifecycle.refusal() -> the 503's message
    "loading": "the server is still loading its model; try again shortly",
    "draining": "the server is shutting down; send the request again (to another replica)",
}

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


class _ScheduledTranscriber:
    """A Transcriber for a worker thread: each model call is one job on the shared scheduler."""

    def __init__(self, inner: Transcriber, scheduler: Any, loop: asyncio.AbstractEventLoop, job_id: str) -> None:
        self.name, self.model_name, self.is_multilingual = inner.name, inner.model_name, inner.is_multilingual
        self._scheduler, self._loop, self._job_id = scheduler, loop, job_id

    def _call(self, method: str, *args: Any) -> Any:
        return self._run(lambda t: getattr(t, method)(*args))

    def _run(self, job: Any) -> Any:
        """One job on the scheduler, below live captions (BACKGROUND); blocks this worker thread."""
        from specscribe.pipeline.scheduler import Priority

        coro = self._scheduler.run(self._job_id, job, Priority.BACKGROUND)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def encode(self, audio, window=None):
        return self._call("encode", audio, window)

    def detect_language(self, encoded):
        return self._call("detect_language", encoded)

    def language_probabilities(self, encoded, top=10):
        return self._call("language_probabilities", encoded, top)

    def decode(self, encoded, request):
        from specscribe.pipeline.lanes import DecodeCall

        def program(_t):  # the decode rides in the scheduler's shared passes
            return (yield DecodeCall(encoded, request))

        return self._run(program)

    def align_words(self, encoded, result):
        return self._call("align_words", encoded, result)

    def encode_text(self, text):
        return self._call("encode_text", text)

    def decode_tokens(self, tokens: Sequence[int]):
        return self._call("decode_tokens", tokens)

    def decode_loop(self):
        from specscribe.models.engines import SequentialDecodeLoop

        return SequentialDecodeLoop(self)  # each decode one job on the scheduler


class RestApi:
    """The REST routes of one server. `transcriber` (when it is loaded later) and `scheduler` are set by the
    app's lifespan; `lifecycle` admits calls (503 while loading or draining) and lets a drain wait for them
    (without one, as in tests of the form parsing, a fresh Lifecycle: loading, so every call gets 503)."""

    def __init__(self, transcriber: Transcriber | None, options: Any, lifecycle: Lifecycle | None = None) -> None:
        self.transcriber = transcriber
        self.options = options
        self.lifecycle = lifecycle or Lifecycle()
        self.scheduler: Any = None
        # decoding and transcribing both hold a slot: a decoded upload is ~230 MB an hour (float32, 16 kHz), so
        # only the running jobs hold decoded audio; the waiting ones hold their compressed upload only
        self._slots = asyncio.Semaphore(options.max_rest_jobs)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/audio/transcriptions", self.transcriptions, methods=["POST"]),
            Route("/v1/audio/translations", self.translations, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
        ]

    async def models(self, request: Request) -> Response:
        try:
            self._check_access(request)
            self._check_admitted()
        except ApiError as exc:
            return exc.response()
        from specscribe.web.server import public_model_name

        name = public_model_name(self.transcriber)
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "specscribe"}]})

    async def transcriptions(self, request: Request) -> Response:
        return await self._handle(request, "transcribe")

    async def translations(self, request: Request) -> Response:
        return await self._handle(request, "translate")

    async def _handle(self, request: Request, task: str) -> Response:
        try:
            self._check_access(request)
            self._check_admitted()
        except ApiError as exc:
            return exc.response()
        with self.lifecycle.hold():  # a drain waits for the call to end
            return await self._transcription(request, task)

    async def _transcription(self, request: Request, task: str) -> Response:
        try:
            fields, data = await self._read_form(request)
            fmt = fields.get("response_format") or "json"
            if fmt not in FORMATS:
                raise ApiError(400, f"response_format must be one of {', '.join(FORMATS)}", "response_format")
            language = (fields.get("language") or "").strip().lower() or None
            if task == "translate":
                language = None
            words = "word" in fields.get("granularities", ())
            search = search_options(fields)
            if search.get("multilingual") and language is not None:
                raise ApiError(400, "multilingual detects the language of every window: leave out language", "multilingual")
            self._check_language(language)
            async with self._slots:
                audio = await self._decode(data)
                del data  # the upload's bytes are not needed past here
                transcript = await self._transcribe(audio, task, language, fields.get("prompt"), words, search)
        except ApiError as exc:
            return exc.response()
        except Exception:  # a server fault: logged here; the client learns nothing of paths or internals
            log.exception("REST transcription failed")
            return ApiError(500, "internal server error").response()
        return render(transcript, fmt, task, words)

    def _check_access(self, request: Request) -> None:
        security = self.options.security
        if not origin_ok(security, request.headers.get("origin"), request.headers.get("host"), loopback=on_loopback(request.scope)):
            raise ApiError(403, "origin not allowed")
        if not key_ok(security, request.headers, request.query_params):
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)", code="invalid_api_key")

    def _check_admitted(self) -> None:
        """503 while the model loads or the server drains: a load balancer sends the call elsewhere."""
        refusal = self.lifecycle.refusal()
        if refusal is not None:
            raise ApiError(503, REFUSALS[refusal], code=refusal)

    async def _read_form(self, request: Request) -> tuple[dict[str, Any], bytes]:
        limit = self.options.max_upload_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit + FORM_OVERHEAD:
            raise ApiError(413, f"upload is over the limit of {limit} bytes", "file")
        # A chunked body has no Content-Length: count what arrives, and stop reading at the limit
        # (the multipart parser would otherwise spool the whole body to disk before we see its size).
        request = Request(request.scope, _limited_receive(request.receive, limit + FORM_OVERHEAD))
        try:
            form = await request.form(max_files=1, max_fields=32)
        except ApiError:
            raise
        except Exception as exc:  # malformed multipart: one line, no traceback
            raise ApiError(400, f"could not parse the multipart form ({type(exc).__name__})") from None
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "missing the `file` part (multipart/form-data)", "file")
        data = await upload.read(limit + 1)
        await form.close()
        if len(data) > limit:
            raise ApiError(413, f"upload is over the limit of {limit} bytes", "file")
        fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        fields["granularities"] = tuple(form.getlist("timestamp_granularities[]")) + tuple(form.getlist("timestamp_granularities"))
        return fields, data

    def _check_language(self, language: str | None) -> None:
        """400 for a language the model cannot do, before any decoding."""
        if language is not None and not self.transcriber.is_multilingual and language != "en":
            raise ApiError(400, f"the loaded model is English-only; language {language!r} is not available", "language")
        from specscribe.web.server import model_languages

        known = model_languages(self.transcriber)  # None: faster-whisper moved its list; not checked
        if language is not None and known is not None and language not in known:
            raise ApiError(400, "language must be an ISO 639-1 code Whisper knows, such as en, de or fr", "language")

    async def _decode(self, data: bytes):
        """The upload as 16 kHz float32, at most max_upload_seconds long: a small upload of a low-bitrate format
        can be hours of audio (114 KB of FLAC decodes to 38 MB), so the decoder stops at the limit (413)."""
        limit = self.options.max_upload_seconds
        try:
            return await asyncio.to_thread(load_audio, data, max_seconds=limit)
        except AudioTooLong:
            raise ApiError(413, f"the uploaded audio is longer than the limit of {limit:g} seconds", "file",
                           "audio_too_long") from None
        except AudioError as exc:
            raise ApiError(400, f"could not read the uploaded file: {_public_reason(exc)}", "file", "invalid_audio") from None

    async def _transcribe(self, audio, task: str, language: str | None, prompt: str | None, words: bool,
                          search: dict[str, Any]):
        """Called holding a slot (self._slots)."""
        from specscribe.pipeline.longform import LongformOptions, transcribe_audio

        options = LongformOptions(language=language, task=task, word_timestamps=words, initial_prompt=prompt or None,
                                  **search)
        job_id = "rest-" + uuid.uuid4().hex[:8]
        proxy = _ScheduledTranscriber(self.transcriber, self.scheduler, asyncio.get_running_loop(), job_id)
        try:
            return await asyncio.to_thread(transcribe_audio, proxy, audio, options, path="upload")
        except (ValueError, KeyError):  # the request's options, but their text may name internals
            log.exception("REST transcription refused")
            raise ApiError(400, "cannot transcribe this request with these options") from None
        finally:
            self.scheduler.forget(job_id)  # the scheduler keeps nothing of a finished request


_SEARCH_FIELDS = {  # form field: (type, lowest, highest)
    "beam_size": (int, 1, MAX_BEAM), "best_of": (int, 1, MAX_BEAM), "n_best": (int, 1, MAX_BEAM),
    "patience": (float, 0.1, 10.0), "length_penalty": (float, 0.0, 10.0),
}


def search_options(fields: dict[str, Any]) -> dict[str, Any]:
    """The LongformOptions of the form's search fields (absent ones keep their defaults). Raises ApiError."""
    out: dict[str, Any] = {}
    for name, (kind, low, high) in _SEARCH_FIELDS.items():
        raw = (fields.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = kind(raw)
        except ValueError:
            raise ApiError(400, f"{name} must be a number from {low} to {high}", name) from None
        if not low <= value <= high:
            raise ApiError(400, f"{name} must be a number from {low} to {high}", name)
        out[name] = value
    if out.get("n_best", 1) > out.get("beam_size", 1):
        raise ApiError(400, "n_best needs a beam_size at least as large (the alternatives are beams)", "n_best")
    hotwords = (fields.get("hotwords") or "").strip()
    if len(hotwords) > MAX_HOTWORDS:
        raise ApiError(400, f"hotwords must be at most {MAX_HOTWORDS} characters", "hotwords")
    if hotwords:
        out["hotwords"] = hotwords
    multilingual = (fields.get("multilingual") or "").strip().lower()
    if multilingual not in ("", "true", "false", "1", "0"):
        raise ApiError(400, "multilingual must be true or false", "multilingual")
    if multilingual in ("true", "1"):
        out["multilingual"] = True
    return out


def _limited_receive(receive: Any, limit: int) -> Any:
    """An ASGI receive() that raises ApiError(413) once the body passes limit bytes."""
    seen = 0

    async def wrapped() -> dict:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise ApiError(413, f"upload is over the limit of {limit - FORM_OVERHEAD} bytes", "file")
        return message

    return wrapped


def _public_reason(exc: AudioError) -> str:
    """An AudioError's reason without the decoder's own exception text (library internals)."""
    reason = str(exc)
    return "cannot decode audio" if reason.startswith("cannot decode audio") else reason


def render(transcript: Any, fmt: str, task: str, words: bool) -> Response:
    """A longform Transcript in one of OpenAI's response formats."""
    text = transcript.text
    if fmt == "text":
        return PlainTextResponse(text + "\n")
    if fmt == "json":
        return JSONResponse({"text": text})
    if fmt in ("srt", "vtt"):
        return PlainTextResponse(subtitles(transcript.segments, fmt), media_type="text/vtt" if fmt == "vtt" else "application/x-subrip")
    segments = []
    for i, s in enumerate(transcript.segments):
        window = _window_of(transcript, s, task)  # the decode's own figures (longform.WindowInfo)
        segment = {
            "id": i, "seek": round((window.start if window else s.start) * 100), "start": s.start, "end": s.end,
            "text": s.text, "tokens": list(s.tokens),
            "temperature": window.temperature if window else 0.0,
            "avg_logprob": round(window.avg_logprob, 4) if window else 0.0,
            "compression_ratio": round(window.compression_ratio, 4) if window else 0.0,
            "no_speech_prob": round(window.no_speech_prob, 4) if window else 0.0,
        }
        if s.language is not None:
            segment["language"] = s.language
        if s.alternatives:
            segment["alternatives"] = alternatives_json(s.alternatives)
        segments.append(segment)
    body: dict[str, Any] = {
        "task": task, "language": transcript.language or "", "duration": round(transcript.duration, 3),
        "text": text, "segments": segments,
    }
    if words:
        body["words"] = [{"word": w.text.strip(), "start": w.start, "end": w.end} for s in transcript.segments for w in s.words]
    return JSONResponse(body)


def _window_of(transcript: Any, segment: Any, task: str) -> Any:
    """The window (of the main task) a segment was decoded in, or None."""
    for window in transcript.windows:
        if window.task == task and window.start - 0.01 <= segment.start <= window.end + 0.01:
            return window
    return None


def subtitles(segments: Sequence[Any], fmt: str) -> str:
    """SRT or WebVTT text of segments (pipeline/writers.py, as `specscribe transcribe` writes them)."""
    from specscribe.pipeline import writers

    return writers.to_srt(segments) if fmt == "srt" else writers.to_vtt(segments)
