"""Subtitle cues: segments wrapped to ``max_line_width`` characters and ``max_line_count`` lines.

When a segment does not fit in one cue and its words are known, it is split into several cues at word
boundaries, each cue timed by its own words; without words, the text is wrapped and the overflow
lines go into further cues that share the segment's time in proportion to their length.

Lines break at spaces, as textwrap does: a word longer than the width stays whole, alone on its line.
Text in scripts written without spaces (Chinese, Japanese, Thai, ...) also breaks between characters,
after punctuation where that is in the line's second half, never before closing punctuation, a small
kana or a combining mark, nor after an opening bracket or a Thai leading vowel.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Sequence

from specscribe.models.types import Segment, Word


@dataclass(frozen=True)
class Cue:
    """One subtitle cue. Attributes: start, end (seconds), lines (already wrapped)."""

    start: float
    end: float
    lines: tuple[str, ...]


# --- wrapping -------------------------------------------------------------------------------
# Thai, Lao, Myanmar, Khmer; CJK radicals, punctuation, kana, ideographs; vertical and fullwidth forms.
_NO_SPACE = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u2e80-\u2fdf\u3000-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]"
)
_NO_LINE_START = frozenset(
    "、。，．！？；：…‥）］｝」』】〕〉》〙〗〟’”｠»,.!?;:)]}%ー々〻ゝゞヽヾ・ぁぃぅぇぉっゃゅょゎゕゖァィゥェォッャュョヮヵヶ"
    "\u0e30\u0e32\u0e33\u0e45\u0eb0\u0eb2\u0eb3"  # Thai and Lao vowels that follow their consonant
)
_NO_LINE_END = frozenset("（［｛「『【〔〈《〘〖〝‘“｟«([{\u0e40\u0e41\u0e42\u0e43\u0e44\u0ec0\u0ec1\u0ec2\u0ec3\u0ec4")
_PAUSE = frozenset("、。，．！？；：…）」』】〕〉》\u3000")  # a line of text without spaces breaks best after these
_WHITESPACE = str.maketrans("\t\n\x0b\x0c\r", "     ")  # as textwrap's replace_whitespace


def _wrap(text: str, width: int) -> list[str]:
    text = text.strip()
    if not _NO_SPACE.search(text):
        return textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]
    return _wrap_unspaced(text.expandtabs().translate(_WHITESPACE), width)


def _units(word: str) -> list[str]:
    """A word (no spaces) cut where a line may break: between the characters of a script written
    without spaces, keeping marks and punctuation with the character they belong to."""
    units: list[str] = []
    for ch in word:
        if units and (
            ch in _NO_LINE_START
            or unicodedata.category(ch) in ("Mn", "Mc", "Me")
            or units[-1][-1] in _NO_LINE_END
            or not (_NO_SPACE.match(ch) or _NO_SPACE.match(units[-1][-1]))  # inside a word of a spaced script
        ):
            units[-1] += ch
        else:
            units.append(ch)
    return units


def _wrap_unspaced(text: str, width: int) -> list[str]:
    """Greedy fill, as textwrap, of spaces (tokens of " ") and units; a unit longer than the width
    goes alone on its line."""
    tokens = [u for part in re.split("( +)", text) if part for u in ([part] if part[0] == " " else _units(part))]
    lines: list[str] = []
    line: list[str] = []
    for tok in tokens:
        if tok[0] == " ":
            if line:
                line.append(tok)
            continue
        if line and sum(map(len, line)) + len(tok) > width:
            keep = _break_at(line, tok, width)
            lines.append("".join(line[:keep]).rstrip(" "))
            line = line[keep:]
            if line and line[0][0] == " ":  # the space the line broke at
                line = line[1:]
        line.append(tok)
    if line:
        lines.append("".join(line).rstrip(" "))
    return lines or [""]


def _break_at(line: list[str], tok: str, width: int) -> int:
    """How many tokens of a full line stay on it when `tok` does not fit: all of them, unless the break
    falls inside a run of text without spaces and a space or a pause in the line's second half leaves
    room for the rest beside `tok`."""
    if line[-1][0] == " ":
        return len(line)
    for k in range(len(line) - 1, 0, -1):
        if line[k - 1][0] == " " or line[k - 1][-1] in _PAUSE:
            kept, rest = "".join(line[:k]).rstrip(" "), "".join(line[k:]).lstrip(" ")
            if 2 * len(kept) < width:
                break
            if len(rest) + len(tok) <= width:
                return k
    return len(line)


# --- cues -----------------------------------------------------------------------------------
_BREAK_AFTER = (".", ",", "!", "?", ";", ":", "…", "。", "，", "！", "？", "；", "：", "、")


def _text(words: Sequence[Word]) -> str:
    return "".join(w.text for w in words)


def _spread(lines: Sequence[str], start: float, end: float, count: int) -> list[Cue]:
    """Lines in cues of `count`, sharing start..end in proportion to their length."""
    groups = [tuple(lines[i : i + count]) for i in range(0, len(lines), count)]
    total = sum(len(" ".join(g)) for g in groups) or 1
    cues, t = [], start
    for g in groups[:-1]:
        dt = (end - start) * len(" ".join(g)) / total
        cues.append(Cue(t, t + dt, g))
        t += dt
    return cues + [Cue(t, end, groups[-1])]


def _cues_from_words(words: Sequence[Word], width: int, count: int) -> list[Cue]:
    """Fill cues word by word; on overflow, break after the last punctuation in the second
    half of the cue if there is one (a clause per cue reads better), else before the word.
    The next cue is filled again from the break, so no cue takes more than `count` lines; a
    word that alone takes more is spread over cues of its own."""
    cues: list[Cue] = []
    i = 0
    while i < len(words):
        end = i + 1  # words[i:end] fits (or is one word)
        while end < len(words) and len(_wrap(_text(words[i : end + 1]), width)) <= count:
            end += 1
        cut = end
        if end < len(words):
            for j in range(end - 1, i + (end - i) // 2 - 1, -1):
                if words[j].text.strip().endswith(_BREAK_AFTER):
                    cut = j + 1
                    break
        lines = _wrap(_text(words[i:cut]), width)
        if "".join(lines).strip():
            cues += _spread(lines, words[i].start, words[cut - 1].end, count)
        i = cut
    return cues


def segment_cues(segment: Segment, width: int, count: int) -> list[Cue]:
    """A segment as one or more cues of at most `count` lines of at most `width` characters (a word
    longer than that alone on its line)."""
    lines = _wrap(segment.text, width)
    if not count or len(lines) <= count:
        return [Cue(segment.start, segment.end, tuple(lines))]
    if segment.words:
        return _cues_from_words(segment.words, width, count)
    return _spread(lines, segment.start, segment.end, count)


def make_cues(segments: Iterable[Segment], width: int, count: int) -> list[Cue]:
    cues = [c for seg in segments if seg.text.strip() for c in segment_cues(seg, width, count)]
    out: list[Cue] = []
    for cue in cues:  # players dislike overlaps and zero-length cues
        start = max(cue.start, out[-1].end if out else 0.0)
        end = max(cue.end, start + 0.001)
        out.append(Cue(start, end, cue.lines))
    return out
