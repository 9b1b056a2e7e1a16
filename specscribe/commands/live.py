"""`specscribe live`: captions from the microphone (or a file played in real time) in the terminal.

Partials are dimmed and rewritten in place on a TTY; finals are appended; `--translate` prints the
English line under each sentence; `--output` saves as it goes; Ctrl-C finalises and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specscribe.commands.engine_args import (
    add_engine_args, add_streaming_args, check_engine_args, check_streaming_args, engine_options, seconds_or_off,
)

# asyncio and the audio pipeline (numpy) are imported where used: building the CLI parser imports
# every command module, and `specscribe transcribe` or `--help` need neither at that point.

FILE_AHEAD = 4.0  # seconds of a file read as fast as possible that wait for the decoder (_live)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "live",
        help="live captions from the microphone or a file played in real time",
        description="Live captions in the terminal. Partial text is dimmed and rewritten in place; "
        "final text is appended. Ctrl-C finalises the last words and exits.",
    )
    a = p.add_argument_group("audio")
    a.add_argument("--input", metavar="FILE", help="caption a file instead of the microphone")
    a.add_argument("--realtime", action="store_true", help="play --input at real-time pace (else as fast as possible)")
    a.add_argument("--list-devices", action="store_true", help="list audio input devices and exit")
    a.add_argument("--device", default=None, metavar="N|NAME", help="input device index or part of its name")
    add_engine_args(p, device_flag="--model-device")
    s = p.add_argument_group("captions")
    s.add_argument("--language", default=None, help="ISO code such as en or de (default: detect)")
    s.add_argument("--languages", default="", metavar="CODES",
                   help="when detecting: the languages it may be, e.g. en,de (default: any)")
    s.add_argument("--translate", action="store_true", help="also show an English translation of each sentence")
    s.add_argument("--output", metavar="FILE", help="save as it goes: FILE.srt, FILE.vtt or FILE.jsonl")
    add_streaming_args(s)
    s.add_argument("--no-partials", action="store_true", help="show final text only")
    s.add_argument("--hotwords", default="", metavar="TEXT", help="words to favour, e.g. \"Kubernetes, Dvořák\"")
    s.add_argument("--beam-size", type=int, default=1, metavar="N",
                   help="beam search width of each update (1: greedy, the default; beams cost rows of every pass)")
    p.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"specscribe live: error: {message}", file=sys.stderr)
    return 2


def _check_language(code: str | None) -> str | None:
    if code in (None, "", "auto"):
        return None
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    code = code.lower()
    if code not in _LANGUAGE_CODES:
        raise ValueError(f"unknown language {code!r} (use an ISO code such as en, de, fr)")
    return code


def run(args: argparse.Namespace) -> int:
    from specscribe.pipeline import sources

    if args.list_devices:
        devices = sources.list_input_devices()
        if not devices:
            print("no audio input devices")
        for d in devices:
            mark = " (default)" if d.default else ""
            print(f"{d.index:3d}: {d.name}  [{d.channels} ch, {d.rate} Hz]{mark}")
        return 0
    if args.realtime and not args.input:
        return _fail("--realtime needs --input FILE")
    if (problem := check_engine_args(args) or check_streaming_args(args)) is not None:
        return _fail(problem)
    if not 1 <= args.beam_size <= 8:
        return _fail("--beam-size must be from 1 to 8")
    try:
        language = _check_language(args.language)
        allowed = tuple(dict.fromkeys(_check_language(c.strip()) for c in args.languages.split(",") if c.strip()))
    except ValueError as exc:
        return _fail(str(exc))
    if allowed and language is not None:
        return _fail("--languages is for detection: leave out --language")
    if args.output:
        suffix = Path(args.output).suffix.lower()
        if suffix not in (".srt", ".vtt", ".jsonl"):
            return _fail(f"--output must end in .srt, .vtt or .jsonl, got {Path(args.output).name!r}")
        if not Path(args.output).resolve().parent.is_dir():
            return _fail(f"--output folder {Path(args.output).parent} does not exist")

    # the audio first: a bad file or device fails before the model loads
    if args.input:
        source = sources.FileSource(args.input, chunk=0.25, realtime=args.realtime)
    else:
        source = sources.MicrophoneSource(args.device)
    # and the output file: one that cannot be written (a folder, no permission) fails before the model loads too
    sink = None
    if args.output:
        from specscribe.pipeline.captions import open_sink

        try:
            sink = open_sink(args.output, translated=args.translate)
        except OSError as exc:
            return _fail(f"cannot write --output {args.output} ({exc.strerror or exc})")
    if not args.input:
        print(f"listening on {source.device.name} (Ctrl-C to stop)", file=sys.stderr)

    import asyncio

    from specscribe.models.engines import load_transcriber
    from specscribe.pipeline.types import StreamOptions

    try:
        transcriber = load_transcriber(engine_options(args))
    except BaseException:
        if sink is not None:
            sink.close()
        raise
    options = StreamOptions(
        language=language,
        languages=allowed,
        translate=args.translate,
        interim_results=not args.no_partials,
        update_interval=args.update_interval,
        agree_gap=args.agree_gap,
        settle_after=seconds_or_off(args.settle_after),
        encoder_pad=args.encoder_pad,
        loaded_encoder_pad=seconds_or_off(args.loaded_encoder_pad),
        pause_commit=seconds_or_off(args.pause_commit),
        draft=args.draft != "none",
        beam_size=args.beam_size,
        hotwords=args.hotwords.strip(),
    )
    realtime = args.realtime or not args.input  # a microphone, or a file played at its own pace
    return asyncio.run(_live(source, transcriber, options, sink, realtime))


async def _live(source, transcriber, options, output=None, realtime: bool = True) -> int:
    """Caption `source` until it ends or Ctrl-C. output: an open caption sink (pipeline/captions.py open_sink;
    closed here) or None. realtime: the source is a microphone or a file at its own pace; else a file read as fast
    as the decoder takes it."""
    import asyncio
    import contextlib
    import signal

    from specscribe.pipeline.audio import AudioError
    from specscribe.pipeline.captions import TerminalCaptions
    from specscribe.pipeline.scheduler import ModelScheduler
    from specscribe.pipeline.session import StreamSession

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_sigint() -> None:  # first Ctrl-C finalises; a second one interrupts at once
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)

    sinks = [TerminalCaptions()] + ([output] if output is not None else [])
    scheduler = ModelScheduler(transcriber)
    session = StreamSession(scheduler, options, "live")
    # A microphone (or a file at its own pace) must never wait: its audio keeps coming during a decode. A file
    # read as fast as possible waits for the decoder instead: the queue holds FILE_AHEAD seconds, so each process()
    # below decodes that much and returns (captions come as the file is decoded, and Ctrl-C is seen within a few
    # seconds) rather than all of the file at once. Not one update interval: updates that far apart hear longer
    # windows, as a slow CPU's do, and a file is decoded in a fraction of the updates (and of the time).
    bound = 0 if realtime else max(1, round(FILE_AHEAD / getattr(source, "chunk", 0.25)))
    queue: asyncio.Queue = asyncio.Queue(bound)

    async def pump() -> None:  # source -> queue, so audio keeps arriving while a decode runs
        end: Exception | None = None
        try:
            async for chunk in source:
                await queue.put(chunk)
                session.lookahead(chunk)  # audio that ends the utterance recalls the update in flight
        except AudioError as exc:
            end = exc
        finally:
            await queue.put(end)  # the end marker

    def emit(events) -> None:
        for event in events:
            for sink in sinks:
                sink.write(event)

    pump_task = loop.create_task(pump())
    stop_task = loop.create_task(stop.wait())
    error: Exception | None = None
    try:
        ended = False
        while not ended and not stop.is_set():
            getter = loop.create_task(queue.get())
            await asyncio.wait({getter, stop_task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                break
            items = [getter.result()]
            while not queue.empty():  # take everything that arrived during the last update
                items.append(queue.get_nowait())
            for item in items:
                if item is None:
                    ended = True
                elif isinstance(item, Exception):
                    error, ended = item, True
                else:
                    session.insert_audio(item)
            emit(await session.process())
        await source.close()
        if not ended:
            # Ctrl-C: the audio captured while the last update ran (and what the source still holds, such as a
            # microphone's last blocks) is queued; it is part of what the user heard, so it goes into the session
            # before finish(). The source ends after close(): wait for its end marker, not for ever.
            async def rest() -> None:
                while (item := await queue.get()) is not None and not isinstance(item, Exception):
                    session.insert_audio(item)

            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(rest(), 1.0)
            while not queue.empty():  # what came before a timeout
                if (item := queue.get_nowait()) is not None and not isinstance(item, Exception):
                    session.insert_audio(item)
        pump_task.cancel()
        events = await session.finish()
        emit(events)
    finally:
        stop_task.cancel()
        for sink in sinks:
            sink.close()
        await scheduler.close()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGINT)
    for line in summary(next((e.stats for e in events if e.type == "stats"), None) or {}, realtime):
        print(line, file=sys.stderr)
    if error is not None:
        print(f"specscribe live: error: {error}", file=sys.stderr)
        return 1
    return 0


def summary(stats: dict, realtime: bool = True) -> list[str]:
    """The lines `live` ends with: the stream's figures, and a word when its decodes fell behind the audio (its own
    load level, pipeline/load.py; on a CPU too slow for the model, partials then come further apart). Not for a
    file read as fast as possible (--input without --realtime): its audio always outruns the decodes."""
    tpp = stats.get("tokens_per_target_pass") or 0
    lines = [f"[{stats.get('audio_s', 0):.1f} s audio, real-time factor {stats.get('rtf', 0):.2f}, "
             + (f"{tpp:.2f} tokens per target pass, " if tpp else "") + f"{stats.get('finals', 0)} finals]"]
    if realtime and (level := (stats.get("stream_load") or {}).get("level_max", 0)) > 0:
        lines.append(f"[decodes fell behind the audio (own load level {level} of 3): partials came further apart; a "
                     "faster CPU keeps up, or for English --model tiny.en (faster, less accurate: docs/benchmarks.md)]")
    return lines
