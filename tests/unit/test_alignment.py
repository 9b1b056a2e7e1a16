"""Word alignment without weights: DTW, the median filter, token jumps to words, punctuation and segments."""

from __future__ import annotations

import numpy as np
import torch

from specscribe.models.alignment import align_words, dtw, fit_words_to_segments, median_filter, word_timings
from specscribe.models.types import Segment


def dtw_reference(x):
    """openai/whisper's dtw_cpu + backtrace, written plainly."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf)
    trace = -np.ones((n + 1, m + 1))
    cost[0, 0] = 0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :], trace[:, 0] = 2, 1
    i, j, out = n, m, []
    while i > 0 or j > 0:
        out.append((i - 1, j - 1))
        t = trace[i, j]
        i, j = (i - 1, j - 1) if t == 0 else (i - 1, j) if t == 1 else (i, j - 1)
    return np.array(out[::-1]).T


def test_dtw_matches_the_reference_including_ties():
    rng = np.random.default_rng(0)
    for n, m in [(1, 1), (1, 7), (7, 1), (5, 9), (12, 40), (30, 31)]:
        x = rng.normal(size=(n, m))
        ti, tj = dtw(x)
        ref = dtw_reference(x)
        assert np.array_equal(ti, ref[0]) and np.array_equal(tj, ref[1])
    x = rng.integers(0, 2, size=(8, 15)).astype(float)  # many ties
    assert np.array_equal(np.stack(dtw(x)), dtw_reference(x))
    for _ in range(40):  # ties everywhere, every shape: the diagonal, token and time steps all get chosen
        x = rng.integers(0, 3, size=(rng.integers(1, 12), rng.integers(1, 30))).astype(float)
        assert np.array_equal(np.stack(dtw(x)), dtw_reference(x))


def test_dtw_follows_a_cheap_diagonal():
    x = np.ones((4, 8))
    for i in range(4):
        x[i, 2 * i : 2 * i + 2] = -5
    ti, tj = dtw(x)
    assert ti[0] == 0 and tj[0] == 0 and ti[-1] == 3 and tj[-1] == 7
    assert all(x[a, b] == -5 for a, b in zip(ti, tj) if b > 0)


def test_median_filter_reflect_padding():
    x = torch.tensor([[1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0]])
    got = median_filter(x, 3)
    padded = [9.0, 1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 7.0]
    want = [float(np.median(padded[i : i + 3])) for i in range(7)]
    assert got.tolist() == [want]


def test_median_filter_equals_torch_median_over_windows():
    """The sorting network gives exactly what openai/whisper's unfold + median gives, ties included."""
    gen = torch.Generator().manual_seed(0)
    for width in (3, 5, 7):
        for x in (torch.randn(3, 5, 40, generator=gen), torch.randint(0, 3, (2, 4, 9), generator=gen).float()):
            pad = width // 2
            padded = torch.nn.functional.pad(x.reshape(1, -1, x.shape[-1]), (pad, pad), mode="reflect")
            want = padded.unfold(-1, width, 1).median(dim=-1).values.reshape(x.shape)
            assert torch.equal(median_filter(x, width), want)


def test_word_timings_at_token_jumps():
    # 3 text tokens + eot; tokens 0,1 form word A, token 2 word B. Row r is the pass position that
    # predicts text token r (row 0: <|notimestamps|>), the last row predicts end-of-text.
    frames = 20
    matrix = torch.full((4, frames), -1.0)
    for row, (a, b) in enumerate([(0, 2), (2, 6), (6, 10), (10, 20)]):
        matrix[row, a:b] = 1.0
    timings = word_timings([" A", " B", "<eot>"], [[1, 2], [3], [99]], matrix, [0.5, 0.7, 0.9])
    assert [t["word"] for t in timings] == [" A", " B"]
    assert (timings[0]["start"], timings[0]["end"]) == (0.0, 6 / 50)
    assert (timings[1]["start"], timings[1]["end"]) == (6 / 50, 10 / 50)
    assert abs(timings[0]["probability"] - 0.6) < 1e-9


def test_fit_merges_punctuation_clips_and_stays_monotonic():
    segs = [Segment(0.0, 1.0, " Hi, you", (1, 2, 3)), Segment(1.0, 2.0, " there.", (4, 5))]
    timings = [
        dict(word=" Hi", tokens=[1], start=0.1, end=0.4, probability=0.9),
        dict(word=",", tokens=[2], start=0.4, end=0.5, probability=0.8),
        dict(word=" you", tokens=[3], start=0.5, end=1.3, probability=0.7),  # runs past its segment
        dict(word=" there", tokens=[4], start=0.9, end=1.6, probability=0.6),  # starts before its segment
        dict(word=".", tokens=[5], start=1.6, end=1.7, probability=0.5),
    ]
    out = fit_words_to_segments(segs, timings, duration=1.65)
    assert [w.text for w in out[0].words] == [" Hi,", " you"]
    assert [w.text for w in out[1].words] == [" there."]
    assert out[0].words[1].end == 1.0 and out[1].words[0].start == 1.0 and out[1].words[0].end <= 1.65
    flat = [w for s in out for w in s.words]
    assert all(a.end <= b.start for a, b in zip(flat, flat[1:]))


def test_align_words_runs_one_pass_on_the_final_tokens():
    sot, nots, eot = [50, 51], 60, 70
    seen = []

    def forward(tokens, logits_from):
        seen.append((list(tokens), logits_from))
        t = len(tokens)
        scores = torch.zeros(2, 2, t, 100)
        for row in range(t):  # each token looks at its own stretch of audio
            scores[:, :, row, min(49, 6 * row) : min(50, 6 * row + 6)] = 8.0
        logits = torch.zeros(t, 80)
        logits[2:4, 1:3] = torch.tensor([[2.0, 0.0], [0.0, 1.0]])  # the rows predicting " a", " b"
        return logits[logits_from:], scores

    def split(tokens):
        return [" a", " b", "<eot>"], [[1], [2], [eot]]

    segs = (Segment(0.0, 1.0, " a b", (1, 2)),)
    out = align_words(forward, sot, nots, eot, split, [(0, 1), (1, 0)], segs, duration=1.0, num_frames=100)
    assert seen == [([50, 51, 60, 1, 2, 70], 2)]  # the head from <|notimestamps|> on
    words = out[0].words
    assert [w.text for w in words] == [" a", " b"] and words[0].start < words[1].start <= 1.0
    assert words[0].probability > words[1].probability > 1 / 70
    # with the decode's own token probabilities the pass skips the head, and the times are the same
    seen.clear()
    again = align_words(forward, sot, nots, eot, split, [(0, 1), (1, 0)], segs, 1.0, 100, text_probs=[0.25, 0.5])
    assert seen == [([50, 51, 60, 1, 2, 70], 6)]
    assert [w.probability for w in again[0].words] == [0.25, 0.5]
    assert [(w.start, w.end) for w in again[0].words] == [(w.start, w.end) for w in words]
