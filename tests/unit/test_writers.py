"""Writers: SRT/VTT/TSV/JSON format details, line wrapping, cue splitting, atomic writes."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscribe.models.types import Segment, SpecStats, Word
from specscribe.pipeline import writers
from specscribe.pipeline.longform import Timing, Transcript
from specscribe.pipeline.writers import (
    WriterOptions,
    format_timestamp,
    make_cues,
    parse_formats,
    to_json,
    to_srt,
    to_tsv,
    to_txt,
    to_vtt,
    write_atomic,
    write_outputs,
)


def _words(text: str, start: float, step: float) -> tuple[Word, ...]:
    return tuple(Word(start + i * step, start + (i + 1) * step, " " + w, 0.9) for i, w in enumerate(text.split()))


def _transcript(segments, translation=None) -> Transcript:
    return Transcript(
        path="x.wav", language="en", language_probability=0.99, duration=75.0, segments=tuple(segments),
        translation=translation, stats=SpecStats(target_passes=10, tokens=20, drafted=12, accepted=9),
        timing=Timing(total=1.5),
    )


SEGS = [
    Segment(0.0, 2.5, " Hello world."),
    Segment(3.0, 3661.123, " Second line, later."),
]


def test_format_timestamp_srt_and_vtt():
    assert format_timestamp(0.0, ",") == "00:00:00,000"
    assert format_timestamp(3661.1234, ",") == "01:01:01,123"
    assert format_timestamp(59.9996) == "00:01:00.000"  # rounding carries into minutes
    assert format_timestamp(-0.2) == "00:00:00.000"


def test_srt_blocks_numbered_with_comma_milliseconds():
    text = to_srt(SEGS)
    blocks = text.strip().split("\n\n")
    assert len(blocks) == 2
    first = blocks[0].splitlines()
    assert first[0] == "1"
    assert first[1] == "00:00:00,000 --> 00:00:02,500"
    assert first[2] == "Hello world."
    assert blocks[1].splitlines()[1] == "00:00:03,000 --> 01:01:01,123"


def test_vtt_header_and_dot_milliseconds():
    text = to_vtt(SEGS)
    assert text.startswith("WEBVTT\n\n")
    assert "00:00:03.000 --> 01:01:01.123\nSecond line, later.\n" in text
    assert "," not in text.splitlines()[2]  # times use a dot


def test_wrapping_respects_width_and_count():
    long = " " + " ".join(["word"] * 40)  # 199 characters
    cues = make_cues([Segment(0.0, 10.0, long)], width=20, count=2)
    assert len(cues) > 1
    for cue in cues:
        assert 1 <= len(cue.lines) <= 2
        assert all(len(line) <= 20 for line in cue.lines)
    assert " ".join(" ".join(c.lines) for c in cues) == long.strip()
    # times split in proportion, contiguous, inside the segment
    assert cues[0].start == 0.0 and abs(cues[-1].end - 10.0) < 1e-6
    assert all(a.end <= b.start + 1e-9 for a, b in zip(cues, cues[1:]))


def test_long_segment_split_at_word_boundaries_with_word_times():
    text = "one two three four five six seven eight nine ten eleven twelve"
    seg = Segment(10.0, 22.0, " " + text, words=_words(text, 10.0, 1.0))
    cues = make_cues([seg], width=12, count=1)
    assert [" ".join(c.lines) for c in cues][0] == "one two"
    assert " ".join(" ".join(c.lines) for c in cues) == text
    # each cue is timed by its own words
    assert cues[0].start == 10.0 and cues[0].end == 12.0
    assert cues[1].start == 12.0
    assert cues[-1].end == 22.0


def test_no_line_limit_keeps_one_cue_per_segment():
    seg = Segment(0.0, 5.0, " " + " ".join(["abc"] * 30))
    cues = make_cues([seg], width=10, count=0)
    assert len(cues) == 1 and len(cues[0].lines) > 2


def test_overlapping_segments_never_overlap_as_cues():
    cues = make_cues([Segment(0.0, 2.0, " a"), Segment(1.5, 1.5, " b")], 42, 2)
    assert cues[1].start >= cues[0].end and cues[1].end > cues[1].start


def test_tsv_milliseconds_and_header():
    rows = to_tsv([Segment(1.2345, 2.5, " tab\there")]).splitlines()
    assert rows[0] == "start\tend\ttext"
    assert rows[1] == "1234\t2500\ttab here" or rows[1] == "1235\t2500\ttab here"


def test_txt_one_line_per_segment_and_empty_for_no_speech():
    assert to_txt(SEGS) == "Hello world.\nSecond line, later.\n"
    assert to_txt([]) == ""
    assert to_srt([]) == ""
    assert to_vtt([]).strip() == "WEBVTT"


def test_json_fields_words_translation_stats():
    seg = Segment(0.0, 2.0, " Hi there.", words=_words("Hi there.", 0.0, 1.0))
    tr = _transcript([seg], translation=(Segment(0.0, 2.0, " Hallo."),))
    doc = json.loads(to_json(tr, WriterOptions(word_timestamps=True)))
    assert doc["text"] == "Hi there."
    assert doc["language"] == "en" and doc["duration"] == 75.0
    assert doc["segments"][0]["words"][1] == {"start": 1.0, "end": 2.0, "text": "there.", "probability": 0.9}
    assert doc["translation"]["text"] == "Hallo."
    assert doc["stats"]["accepted"] == 9 and doc["stats"]["acceptance_rate"] == 0.75
    doc2 = json.loads(to_json(tr))
    assert "words" not in doc2["segments"][0]


def test_json_segments_carry_alternatives_and_language_only_when_there():
    from specscribe.models.types import Alternative

    alts = (Alternative(" Hi there.", (1, 2), -0.12345), Alternative(" Hi, there.", (1, 3, 2), -0.5))
    tr = _transcript([Segment(0.0, 2.0, " Hi there.", (1, 2), alternatives=alts, language="de"), SEGS[0]])
    first, second = json.loads(to_json(tr))["segments"]
    assert first["language"] == "de"
    assert first["alternatives"] == [{"text": "Hi there.", "tokens": [1, 2], "avg_logprob": -0.1235},
                                     {"text": "Hi, there.", "tokens": [1, 3, 2], "avg_logprob": -0.5}]
    assert "alternatives" not in second and "language" not in second


def test_parse_formats():
    assert parse_formats("srt, vtt,srt") == ("srt", "vtt")
    assert parse_formats("all") == writers.FORMATS
    with pytest.raises(ValueError, match="unknown output format 'doc'"):
        parse_formats("txt,doc")


def test_write_outputs_all_formats_and_translation(tmp_path: Path):
    tr = _transcript(SEGS, translation=(Segment(0.0, 1.0, " Hallo."),))
    paths = write_outputs(tr, tmp_path / "sub" / "clip", writers.FORMATS, WriterOptions())
    names = sorted(p.name for p in paths)
    assert "clip.json" in names and "clip.translation.srt" in names and "clip.translation.json" not in names
    assert all(p.is_file() for p in paths)
    assert not [p for p in (tmp_path / "sub").iterdir() if p.name.endswith(".tmp")]


def test_atomic_write_leaves_old_file_on_crash(tmp_path: Path, monkeypatch):
    target = tmp_path / "out.srt"
    target.write_text("old complete file\n")

    class Crash(Exception):
        pass

    real_fsync = os.fsync

    def crash(fd):  # the data is half written when the crash comes
        raise Crash()

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(Crash):
        write_atomic(target, "new content " * 1000)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "old complete file\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.srt"]  # no temp file left behind


def test_render_error_writes_nothing(tmp_path: Path):
    tr = _transcript(SEGS)
    with pytest.raises(ValueError):
        write_outputs(tr, tmp_path / "clip", ("txt", "nope"), WriterOptions())
    assert list(tmp_path.iterdir()) == []


def test_srt_timestamps_match_pattern():
    pattern = re.compile(r"^\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}$")
    lines = [l for l in to_srt(SEGS).splitlines() if "-->" in l]
    assert lines and all(pattern.match(l) for l in lines)


def test_word_split_prefers_a_clause_boundary():
    text = "ask not what your country can do for you, ask what you can do for your country."
    seg = Segment(0.0, 17.0, " " + text, words=_words(text, 0.0, 1.0))
    cues = make_cues([seg], width=30, count=2)  # 81 characters: three lines of 30, so two cues
    assert " ".join(cues[0].lines).endswith("for you,")
    assert cues[0].end == 9.0 and cues[1].start == 9.0
    assert " ".join(" ".join(c.lines) for c in cues) == text


def test_failed_write_removes_the_other_files_of_the_same_input(tmp_path: Path, monkeypatch):
    calls = []
    real = writers.write_atomic

    def flaky(path, text):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(writers, "write_atomic", flaky)
    with pytest.raises(OSError):
        write_outputs(_transcript(SEGS), tmp_path / "clip", writers.FORMATS, WriterOptions())
    assert list(tmp_path.iterdir()) == []


def test_write_outputs_removes_the_temp_files_of_a_killed_write(tmp_path: Path):
    """kill -9 between mkstemp and os.replace leaves `.clip.txt.XXXX.tmp`; the next write of clip cleans it,
    and leaves other inputs' temp files (maybe being written right now) alone."""
    stale = tmp_path / ".clip.txt.k1ll3d.tmp"
    stale.write_text("half a transc")
    other = tmp_path / ".clip2.txt.abcd.tmp"
    other.write_text("another input")
    assert writers.stale_temps(tmp_path / "clip.txt") == [stale]
    write_outputs(_transcript(SEGS), tmp_path / "clip", ("txt",), WriterOptions())
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".clip2.txt.abcd.tmp", "clip.txt"]


# --- file mode --------------------------------------------------------------------------------
@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077], ids=oct)
def test_outputs_get_the_mode_a_plain_open_gives(tmp_path: Path, umask: int):
    """mkstemp makes 0600 files and os.replace keeps that: outputs must be 0666 & ~umask, like open()'s."""
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "one.srt", "x\n")
        paths = write_outputs(_transcript(SEGS), tmp_path / "clip", writers.FORMATS, WriterOptions())
        (tmp_path / "plain.txt").write_text("x\n")
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    assert (tmp_path / "plain.txt").stat().st_mode & 0o777 == want
    for path in [tmp_path / "one.srt", *paths]:
        assert path.stat().st_mode & 0o777 == want, path.name
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(writers.TEMP_SUFFIX)]


# --- text without spaces ----------------------------------------------------------------------
ZH = "我们今天要讨论的是人工智能在医疗领域的应用以及它对未来社会可能产生的深远影响和挑战，这是一个非常重要的话题"


def test_chinese_wraps_at_characters_and_prefers_punctuation():
    assert len(ZH) == 53
    cues = make_cues([Segment(0.0, 8.0, ZH)], width=42, count=2)
    assert [c.lines for c in cues] == [(ZH[:42], ZH[42:])]  # the 42nd character is "，"
    cues = make_cues([Segment(0.0, 8.0, ZH)], width=30, count=2)  # no pause before 30: a break at 30
    assert [c.lines for c in cues] == [(ZH[:30], ZH[30:])]
    text = "今天天气很好，我们去公园散步吧"  # "，" at 6 of 15: a line of 10 ends after it
    assert make_cues([Segment(0.0, 3.0, text)], width=10, count=2)[0].lines == ("今天天气很好，", "我们去公园散步吧")


def test_no_line_starts_with_closing_punctuation_or_a_thai_mark():
    lines = make_cues([Segment(0.0, 3.0, "一二三四五。六七八九十")], width=5, count=0)[0].lines
    assert lines == ("一二三四", "五。六七八", "九十")
    thai = "สวัสดีครับยินดีต้อนรับสู่การประชุมวันนี้"
    lines = make_cues([Segment(0.0, 3.0, thai)], width=10, count=0)[0].lines
    assert "".join(lines) == thai and all(len(line) <= 10 for line in lines)
    assert not any(unicodedata.category(line[0]) in ("Mn", "Mc") for line in lines)


def test_chinese_word_timings_split_into_cues_within_the_width():
    words = tuple(Word(i * 0.2, i * 0.2 + 0.2, c, 1.0) for i, c in enumerate(ZH))
    cues = make_cues([Segment(0.0, words[-1].end, ZH, words=words)], width=20, count=1)
    assert [c.lines for c in cues] == [(ZH[:20],), (ZH[20:40],), (ZH[40:],)]
    assert [(c.start, c.end) for c in cues] == [(0.0, words[19].end), (words[20].start, words[39].end),
                                                (words[40].start, words[-1].end)]


def test_english_wrapping_and_long_words_unchanged():
    url = "https://example.com/" + "a" * 40
    cues = make_cues([Segment(0.0, 2.0, f" see {url} for more")], width=30, count=0)
    assert cues[0].lines == ("see", url, "for more")


# --- the word splitter's guarantee ------------------------------------------------------------
def _check_cues(cues, words, width, count):
    for cue in cues:
        assert 1 <= len(cue.lines) <= count, cue.lines
        for line in cue.lines:  # only a word longer than the width may pass it, alone on its line
            assert len(line) <= width or not any(ch.isspace() for ch in line), (width, cue.lines)
    squeeze = lambda s: "".join(s.split())
    assert squeeze("".join(line for c in cues for line in c.lines)) == squeeze("".join(w.text for w in words))
    times = [t for c in cues for t in (c.start, c.end)]  # in order, from the first word to the last
    assert times == sorted(times) and times[0] == words[0].start and times[-1] == words[-1].end


def test_word_split_rechecks_the_rest_after_a_clause_cut():
    """The reviewer's fuzz: the cut at "xx," left a group that, with the next word, took two lines at count 1."""
    texts = [" x,", " xxx", " xx,", " xxxxxxxxxxxxxx", " xxxxxxxxxxxxxxx", " xxxxxxxxxxxx", " xxxxxxxxxxxxxx,",
             " xxxxxxxxxxxxxxxx,", " xxxxx", " xxxx", " xxxxx,", " xxxxx", " x,", " xxxxxxxxx,", " xxxxx"]
    words = tuple(Word(i * 0.3, i * 0.3 + 0.3, t, 1.0) for i, t in enumerate(texts))
    seg = Segment(0.0, words[-1].end, "".join(texts), words=words)
    _check_cues(writers.segment_cues(seg, 42, 1), words, 42, 1)


_WORD_TEXT = st.one_of(
    st.text("abcxyz", min_size=1, max_size=50),
    st.text("我们今天人工智能のはタイ", min_size=1, max_size=8),
    st.text("กขคสวัด่้", min_size=1, max_size=8),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), _WORD_TEXT, st.sampled_from(["", "", ",", ".", "，", "。"])), min_size=1, max_size=40),
    st.integers(4, 50),
    st.integers(1, 3),
)
def test_word_split_never_exceeds_the_line_count(parts, width, count):
    words = tuple(Word(float(i), i + 1.0, (" " if space else "") + text + punct, 1.0)
                  for i, (space, text, punct) in enumerate(parts))
    seg = Segment(0.0, words[-1].end, "".join(w.text for w in words), words=words)
    _check_cues(writers.segment_cues(seg, width, count), words, width, count)


# --- escaping ---------------------------------------------------------------------------------
MARKUP = [Segment(0.0, 2.0, " Q&A about <b>tags</b> and x < y"), Segment(2.0, 3.0, " step one --> step ---> two")]


def test_vtt_escapes_markup_and_arrows():
    text = to_vtt(MARKUP)
    assert "Q&amp;A about &lt;b&gt;tags&lt;/b&gt; and x &lt; y\n" in text
    assert "\nstep one -&gt; step -&gt; two\n" in text
    assert [l for l in text.splitlines() if "-->" in l] == ["00:00:00.000 --> 00:00:02.000", "00:00:02.000 --> 00:00:03.000"]


def test_srt_replaces_arrows_only():
    text = to_srt(MARKUP)
    assert "\nQ&A about <b>tags</b> and x < y\n" in text
    assert "\nstep one -> step -> two\n" in text
    assert [l for l in text.splitlines() if "-->" in l] == ["00:00:00,000 --> 00:00:02,000", "00:00:02,000 --> 00:00:03,000"]


def test_txt_json_tsv_keep_the_text_as_it_is():
    assert to_txt(MARKUP) == "Q&A about <b>tags</b> and x < y\nstep one --> step ---> two\n"
    assert to_tsv(MARKUP).splitlines()[2] == "2000\t3000\tstep one --> step ---> two"
    assert json.loads(to_json(_transcript(MARKUP)))["segments"][0]["text"] == "Q&A about <b>tags</b> and x < y"
