"""n-best alternatives of a part of a decode: which span of each hypothesis matches a segment or a final.

A decode's n-best hypotheses (WindowResult.alternatives, best first) cover the whole window, while
users read segments (batch) and finals (streaming), each a span of the best hypothesis. The span of
another hypothesis that corresponds to it is found by aligning the two token sequences
(difflib): equal runs carry a boundary over exactly; inside a replaced run it moves in proportion;
an inserted run goes with the span after it. No model pass is needed.

Alternatives of a span are deduplicated by text (the best first, so it is always the span's own
text), and each gets the mean log-probability of its tokens where the engine kept them, else its
hypothesis' avg_logprob.
"""

from __future__ import annotations

import difflib
import re
from typing import Callable, Sequence

from specscribe.models.types import Alternative, Segment

Decode = Callable[[Sequence[int]], str]


def map_boundary(opcodes, i: int, b_len: int) -> int:
    """Where boundary i of sequence a (0..len(a)) falls in sequence b, given a->b opcodes."""
    for tag, i1, i2, j1, j2 in opcodes:
        if i == i1:
            return j1
        if i1 < i < i2:
            if tag == "equal":
                return j1 + (i - i1)
            return j1 + round((i - i1) * (j2 - j1) / (i2 - i1))
    return b_len


def span_alternatives(best: Sequence[int], alternatives: Sequence[Alternative], spans: Sequence[tuple[int, int]],
                      decode: Decode) -> list[tuple[Alternative, ...]]:
    """Per span [a, b) of ``best`` (text token ids), the matching span of every alternative, ranked,
    deduplicated by text. alternatives: the n-best hypotheses, best first (their tokens: text ids)."""
    mapped = []
    for alt in alternatives:
        ops = difflib.SequenceMatcher(a=list(best), b=list(alt.tokens), autojunk=False).get_opcodes()
        mapped.append((alt, ops))
    out = []
    for a, b in spans:
        seen: set[str] = set()
        ranked = []
        for alt, ops in mapped:
            start, end = map_boundary(ops, a, len(alt.tokens)), map_boundary(ops, b, len(alt.tokens))
            ids = tuple(alt.tokens[start:end])
            text = decode(ids)
            if text.strip() in seen:
                continue
            seen.add(text.strip())
            lps = alt.token_logprobs[start:end] if len(alt.token_logprobs) == len(alt.tokens) else ()
            avg = sum(lps) / len(lps) if lps else alt.avg_logprob
            ranked.append(Alternative(text, ids, round(avg, 4)))
        out.append(tuple(ranked))
    return out


def segment_spans(best: Sequence[int], segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """Each segment's [a, b) in best (the window's text token ids), found in order."""
    spans, cursor = [], 0
    best = list(best)
    for seg in segments:
        n = len(seg.tokens)
        at = cursor
        while at + n <= len(best) and best[at : at + n] != list(seg.tokens):
            at += 1
        if at + n > len(best):  # not found (should not happen): an empty span where the cursor is
            spans.append((cursor, cursor))
            continue
        spans.append((at, at + n))
        cursor = at + n
    return spans


def with_alternatives(segments: Sequence[Segment], alternatives: Sequence[Alternative], decode: Decode) -> tuple[Segment, ...]:
    """The window's segments, each with its span of every alternative (alternatives[0]: the best)."""
    import dataclasses

    if not alternatives:
        return tuple(segments)
    best = alternatives[0].tokens
    per_segment = span_alternatives(best, alternatives, segment_spans(best, segments), decode)
    return tuple(dataclasses.replace(seg, alternatives=alts) for seg, alts in zip(segments, per_segment))


def final_alternatives(words: Sequence, others: Sequence[Sequence[str]], committed: Sequence, limit: int) -> tuple[str, ...]:
    """The n-best texts of ``committed`` (Word objects, a run of ``words``: the decode's own words);
    empty when they are not this decode's (words held over a pause and committed later)."""
    if not committed or not others:
        return ()
    ids = [id(w) for w in words]
    a = ids.index(id(committed[0])) if id(committed[0]) in ids else -1
    if a < 0 or ids[a : a + len(committed)] != [id(w) for w in committed]:
        return ()
    return word_span_alternatives([w.text for w in words], others, a, a + len(committed), limit)


def split_words(text: str) -> tuple[str, ...]:
    """A hypothesis' text as words, each with its leading space (a text without spaces is one word)."""
    return tuple(re.findall(r"\s*\S+", text))


def word_span_alternatives(words: Sequence[str], others: Sequence[Sequence[str]], a: int, b: int,
                           limit: int) -> tuple[str, ...]:
    """Streaming finals: the text of words [a, b) of the best hypothesis, then the same span of each
    other hypothesis (``others``: their words, ranked), deduplicated, at most ``limit`` texts."""
    from specscribe.pipeline.policy import normalize_word

    norm = [normalize_word(w) for w in words]
    own = "".join(words[a:b]).strip()
    out, seen = [own], {normalize_word(own)}
    for alt in others:
        if len(out) >= limit:
            break
        ops = difflib.SequenceMatcher(a=norm, b=[normalize_word(w) for w in alt], autojunk=False).get_opcodes()
        text = "".join(alt[map_boundary(ops, a, len(alt)) : map_boundary(ops, b, len(alt))]).strip()
        if text and normalize_word(text) not in seen:
            seen.add(normalize_word(text))
            out.append(text)
    return tuple(out)
