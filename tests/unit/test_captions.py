"""Caption sinks: terminal rendering (partials in place), JSONL, SRT and VTT written as events come."""

import io
import json

import pysubs2
import webvtt

from specscribe.models.types import Word
from specscribe.pipeline.captions import CLEAR_LINE, DIM, JsonlSink, SubtitleSink, TerminalCaptions, open_sink
from specscribe.pipeline.types import CaptionEvent


def final(i, start, end, text):
    words = tuple(Word(start + k * 0.3, start + k * 0.3 + 0.25, " " + t) for k, t in enumerate(text.split()))
    return CaptionEvent("final", emitted_at=end + 1, id=i, start=start, end=end, text=text, words=words)


EVENTS = [
    CaptionEvent("speech_start", 0.1, start=0.2),
    CaptionEvent("partial", 0.6, start=0.2, end=0.5, text="hello wor"),
    final(0, 0.2, 0.9, "Hello world,"),
    CaptionEvent("partial", 1.2, start=1.0, end=1.3, text="how are"),
    final(1, 1.0, 2.0, "how are you?"),
    CaptionEvent("line", 2.1, id=1, start=0.2, end=2.0, text="Hello world, how are you?"),
    CaptionEvent("translation", 3.0, id=1, start=0.2, end=2.0, text="HELLO WORLD, HOW ARE YOU?"),
    final(2, 2.5, 3.5, "Fine"),
    CaptionEvent("speech_end", 4.2, end=3.6),
    CaptionEvent("line", 4.6, id=2, start=2.5, end=3.5, text="Fine"),
    CaptionEvent("translation", 4.7, id=2, start=2.5, end=3.5, text="FINE"),
]


def test_terminal_tty_rewrites_partials_in_place_and_appends_finals():
    out = io.StringIO()
    term = TerminalCaptions(out, tty=True, width=80)
    for e in EVENTS:
        term.write(e)
    term.close()
    screen = out.getvalue()
    assert f"{DIM}hello wor" in screen  # partial shown dimmed
    assert screen.count("\n") == 4  # two caption lines, two translation lines
    lines = [seg.rsplit(CLEAR_LINE, 1)[-1] for seg in screen.split("\n")]
    lines = [line for line in lines if line]
    assert lines == ["Hello world, how are you?", "  \x1b[36m→ HELLO WORLD, HOW ARE YOU?\x1b[0m", "Fine", "  \x1b[36m→ FINE\x1b[0m"]


def test_terminal_without_tty_prints_plain_finished_lines_only():
    out = io.StringIO()
    term = TerminalCaptions(out, tty=False)
    for e in EVENTS:
        term.write(e)
    term.close()
    assert out.getvalue() == "Hello world, how are you?\n  [en] HELLO WORLD, HOW ARE YOU?\nFine\n  [en] FINE\n"


def test_jsonl_has_every_event(tmp_path):
    path = tmp_path / "out.jsonl"
    sink = open_sink(path)
    assert isinstance(sink, JsonlSink)
    for e in EVENTS:
        sink.write(e)
    sink.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in rows] == [e.type for e in EVENTS]
    assert all("emitted_at" in r for r in rows)
    assert rows[5] == {"type": "line", "emitted_at": 2.1, "id": 1, "start": 0.2, "end": 2.0,
                       "text": "Hello world, how are you?"}
    fin = rows[2]
    assert fin["start"] == 0.2 and fin["end"] == 0.9 and fin["text"] == "Hello world," and len(fin["words"]) == 2
    assert rows[1]["text"] == "hello wor" and "words" not in rows[1]


def _secs(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def test_srt_and_vtt_cues_with_translations(tmp_path):
    for fmt in ("srt", "vtt"):
        path = tmp_path / f"out.{fmt}"
        sink = open_sink(path, translated=True)
        assert isinstance(sink, SubtitleSink)
        for e in EVENTS:
            sink.write(e)
        sink.close()
        if fmt == "srt":
            subs = pysubs2.load(str(path))
            cues = [(round(s.start / 1000, 2), round(s.end / 1000, 2), s.plaintext) for s in subs]
        else:
            cues = [(_secs(c.start), _secs(c.end), c.text) for c in webvtt.read(str(path))]
        assert [c[2] for c in cues] == ["Hello world, how are you?\nHELLO WORLD, HOW ARE YOU?", "Fine\nFINE"]
        assert abs(cues[0][0] - 0.2) < 0.01 and abs(cues[0][1] - 2.0) < 0.01


def test_subtitle_cues_are_written_as_they_complete(tmp_path):
    path = tmp_path / "live.srt"
    sink = SubtitleSink(path, "srt")
    for e in EVENTS[:5]:
        sink.write(e)
    assert path.read_text() == ""  # the line is still open
    sink.write(EVENTS[5])
    assert "Hello world, how are you?" in path.read_text()  # its line ended: before close
    sink.close()


def test_lines_not_sentences_cut_cues_and_the_terminal(tmp_path):
    """A sentence that spans two lines is two cues; a line of two sentences is one."""
    events = [final(0, 0.0, 1.0, "One."), final(1, 1.0, 2.0, "Two"), CaptionEvent("line", 2.0, id=1, start=0.0, end=2.0, text="One. Two"),
              final(2, 2.0, 3.0, "three,"), final(3, 3.0, 4.0, "four.")]
    path = tmp_path / "lines.srt"
    sink, out = SubtitleSink(path, "srt"), io.StringIO()
    term = TerminalCaptions(out, tty=False)
    for e in events:
        sink.write(e)
        term.write(e)
    assert [s.plaintext for s in pysubs2.load(str(path))] == ["One. Two"]
    assert out.getvalue() == "One. Two\n"
    sink.close()  # finals no line closed yet: a cue of their own, nothing lost
    term.close()
    cues = [(s.start, s.end, s.plaintext) for s in pysubs2.load(str(path))]
    assert cues == [(0, 2000, "One. Two"), (2000, 4000, "three, four.")]
    assert out.getvalue() == "One. Two\nthree, four.\n"


def test_terminal_wraps_an_open_line_at_its_width():
    out = io.StringIO()
    term = TerminalCaptions(out, tty=False, width=20)
    for i, word in enumerate(["sixteen letters.", "more", "and more"]):
        term.write(final(i, i, i + 1, word))
    assert out.getvalue() == "sixteen letters. more\n"


def test_stream_prints_caption_lines_and_translations(capsys):
    from specscribe.commands.stream import _print_text

    for e in EVENTS:
        _print_text(e.to_dict())
    out = capsys.readouterr().out.splitlines()
    assert out == ["[   0.20 ->    2.00] Hello world, how are you?", f"{'':20} HELLO WORLD, HOW ARE YOU?",
                   "[   2.50 ->    3.50] Fine", f"{'':20} FINE"]
