"""Where caption events go: the terminal (partials rewritten in place), and files written as the
stream goes (JSONL: every event; SRT/VTT: one cue per caption line, with the translation as a
second line when translation is on). Lines are the session's `line` events (pipeline/lines.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Protocol, TextIO

from specscribe.pipeline.lines import join_texts
from specscribe.pipeline.types import CaptionEvent

DIM, CYAN, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[36m", "\x1b[0m", "\r\x1b[2K"


class CaptionSink(Protocol):
    def write(self, event: CaptionEvent) -> None: ...

    def close(self) -> None: ...


class TerminalCaptions:
    """Finals accumulate on the current line; the partial follows them dimmed and is rewritten in
    place (TTY only). A line ends at a `line` event (or wraps at the terminal's width); with
    translation on, the English line is printed under it. Without a TTY only finished lines print."""

    def __init__(self, out: TextIO | None = None, tty: bool | None = None, width: int | None = None) -> None:
        self.out = out = out if out is not None else sys.stdout  # looked up now, not at import (redirections)
        self.tty = out.isatty() if tty is None else tty
        self.width = width or shutil.get_terminal_size((100, 24)).columns
        self._line = ""  # committed text of the current line
        self._partial = ""

    def write(self, event: CaptionEvent) -> None:
        if event.type == "partial":
            self._partial = event.text
            self._render()
        elif event.type == "final":
            self._line = join_texts([self._line, event.text], event.language)
            self._partial = ""
            if len(self._line) > self.width - 1:
                self._end_line()
            else:
                self._render()
        elif event.type == "line":
            self._end_line()
        elif event.type == "speech_end":
            self._partial = ""
            self._render()
        elif event.type == "translation":
            self._end_line()
            self._print(f"  {CYAN}→ {event.text}{RESET}" if self.tty else f"  [en] {event.text}")

    def close(self) -> None:
        self._partial = ""
        self._end_line()
        self.out.flush()

    def _render(self) -> None:
        if not self.tty:
            return
        room = self.width - 1
        shown = self._line[-room:]
        partial = self._partial[-max(0, room - len(shown) - 1) :] if self._partial else ""
        text = shown + (f"{' ' if shown else ''}{DIM}{partial}{RESET}" if partial else "")
        self.out.write(CLEAR_LINE + text)
        self.out.flush()

    def _end_line(self) -> None:
        if self._line:
            self._print(self._line)
            self._line = ""
        elif self.tty:
            self.out.write(CLEAR_LINE)
        if self._partial:
            self._render()

    def _print(self, text: str) -> None:
        self.out.write((CLEAR_LINE if self.tty else "") + text + "\n")
        self.out.flush()


class JsonlSink:
    """Every event, one JSON object a line, flushed as it comes."""

    def __init__(self, path: str | Path) -> None:
        self._fh = open(path, "w", encoding="utf-8")

    def write(self, event: CaptionEvent) -> None:
        self._fh.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _timestamp(seconds: float, sep: str) -> str:
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


class SubtitleSink:
    """SRT or VTT cues, one per caption line (`line` event); finals no line closed yet become a
    cue at close. With `translated`, a cue waits for the translation covering its last final and
    shows it as a second line."""

    def __init__(self, path: str | Path, fmt: str, translated: bool = False) -> None:
        if fmt not in ("srt", "vtt"):
            raise ValueError(f"subtitle format must be srt or vtt, got {fmt!r}")
        self.fmt = fmt
        self.translated = translated
        self._fh = open(path, "w", encoding="utf-8")
        if fmt == "vtt":
            self._fh.write("WEBVTT\n\n")
        self._n = 0
        self._cue: list[CaptionEvent] = []  # finals of the open line
        self._done: list[tuple[float, float, str, int, int]] = []  # (start, end, text, first id, last id)
        self._translations: list[CaptionEvent] = []  # a translation's id is the last final it covers
        self._translated_to = -1

    def write(self, event: CaptionEvent) -> None:
        if event.type == "final" and event.text:
            self._cue.append(event)
        elif event.type == "line":
            first = (self._cue[0].id or 0) if self._cue else (event.id or 0)
            self._done.append((event.start or 0.0, event.end or 0.0, event.text, first, event.id or 0))
            self._cue = [e for e in self._cue if (e.id or 0) > (event.id or 0)]
        elif event.type == "translation":
            self._translations.append(event)
            self._translated_to = max(self._translated_to, event.id or 0)
        self._emit_ready(final=False)

    def close(self) -> None:
        self._close_cue()
        self._emit_ready(final=True)
        self._fh.close()

    def _close_cue(self) -> None:
        if self._cue:
            first, last = self._cue[0], self._cue[-1]
            text = join_texts([e.text for e in self._cue], first.language)
            self._done.append((first.start or 0.0, last.end or 0.0, text, first.id or 0, last.id or 0))
            self._cue = []

    def _emit_ready(self, final: bool) -> None:
        while self._done:
            start, end, text, first_id, last_id = self._done[0]
            english = ""
            if self.translated:
                if not final and self._translated_to < last_id:
                    return  # a translation covering this cue's finals has not arrived yet
                english = " ".join(t.text for t in self._translations if first_id <= (t.id or 0) <= last_id)
                self._translations = [t for t in self._translations if (t.id or 0) > last_id]
            self._done.pop(0)
            self._n += 1
            sep = "," if self.fmt == "srt" else "."
            head = f"{self._n}\n" if self.fmt == "srt" else ""
            self._fh.write(f"{head}{_timestamp(start, sep)} --> {_timestamp(max(end, start + 0.05), sep)}\n")
            self._fh.write(text + (f"\n{english}" if english else "") + "\n\n")
            self._fh.flush()


def open_sink(path: str | Path, translated: bool = False) -> CaptionSink:
    """A sink for FILE.srt, FILE.vtt or FILE.jsonl (by extension); ValueError for others."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix == "jsonl":
        return JsonlSink(path)
    if suffix in ("srt", "vtt"):
        return SubtitleSink(path, suffix, translated)
    raise ValueError(f"--output must end in .srt, .vtt or .jsonl, got {Path(path).name!r}")
