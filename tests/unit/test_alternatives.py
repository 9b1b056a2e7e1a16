"""n-best alternatives mapped onto segments and finals (pipeline/alternatives.py), text only."""

from __future__ import annotations

import difflib

from specscribe.models.types import Alternative, Segment
from specscribe.pipeline.alternatives import (
    map_boundary,
    segment_spans,
    span_alternatives,
    split_words,
    with_alternatives,
    word_span_alternatives,
)

VOCAB = {1: " and", 2: " so", 3: " my", 4: " fellow", 5: " Americans", 6: ",", 7: " ask", 8: " asked", 9: " not",
         10: " what", 11: " your", 12: " country", 13: " so,"}


def decode(ids) -> str:
    return "".join(VOCAB[i] for i in ids)


def alt(ids, avg=-0.5, lps=None) -> Alternative:
    return Alternative(decode(ids), tuple(ids), avg, tuple(lps) if lps is not None else ())


def test_boundaries_carry_over_equal_runs_and_replacements():
    a, b = [1, 2, 3, 4, 5, 7, 9], [1, 13, 3, 4, 5, 8, 9]
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    assert [map_boundary(ops, i, len(b)) for i in range(len(a) + 1)] == list(range(len(a) + 1))
    inserted = [1, 2, 6, 3, 4]  # a comma inserted after "so": it goes with what follows
    ops = difflib.SequenceMatcher(a=[1, 2, 3, 4], b=inserted, autojunk=False).get_opcodes()
    assert map_boundary(ops, 2, len(inserted)) == 2 and map_boundary(ops, 4, len(inserted)) == 5


def test_each_segment_gets_its_span_of_every_hypothesis_deduplicated():
    best = [1, 2, 3, 4, 5, 7, 9, 10, 11, 12]
    hyps = [alt(best, lps=[-0.1] * 10), alt([1, 13, 3, 4, 5, 7, 9, 10, 11, 12], -0.6),
            alt([1, 2, 3, 4, 5, 8, 9, 10, 11, 12], -0.7)]
    segments = [Segment(0.0, 2.0, decode(best[:5]), tuple(best[:5])), Segment(2.0, 4.0, decode(best[5:]), tuple(best[5:]))]
    assert segment_spans(best, segments) == [(0, 5), (5, 10)]
    out = with_alternatives(segments, hyps, decode)
    assert [a.text for a in out[0].alternatives] == [" and so my fellow Americans", " and so, my fellow Americans"]
    assert [a.text for a in out[1].alternatives] == [" ask not what your country", " asked not what your country"]
    assert out[0].alternatives[0].avg_logprob == -0.1  # the mean of its tokens' log-probs
    assert out[1].alternatives[1].avg_logprob == -0.7  # no token log-probs (ct2): the hypothesis'
    assert out[0].text == segments[0].text and out[0].alternatives[0].tokens == tuple(best[:5])


def test_no_alternatives_leaves_segments_alone():
    seg = Segment(0.0, 1.0, " and", (1,))
    assert with_alternatives([seg], (), decode) == (seg,)
    assert span_alternatives([1], [alt([1])], [(0, 1)], decode) == [(Alternative(" and", (1,), -0.5),)]


def test_a_final_gets_its_own_text_first_then_the_others_span():
    best = split_words(" And so my fellow Americans, asked not what your country")
    others = [split_words(" And so, my fellow Americans, ask not what your country"),
              split_words(" And so my fellow Americans, ask not what your country")]
    got = word_span_alternatives(best, others, 5, 7, limit=3)
    assert got == ("asked not", "ask not")  # the second other repeats the first: dropped
    assert word_span_alternatives(best, others, 5, 7, limit=1) == ("asked not",)
    assert split_words("你好世界") == ("你好世界",)
