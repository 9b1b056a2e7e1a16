"""Word timestamps from the target's cross-attention, as openai/whisper and faster-whisper do them.

One target pass over [sot sequence, <|notimestamps|>, text tokens, end-of-text] collects the
cross-attention of the alignment heads (config.json "alignment_heads", [layer, head] pairs).
The weights are softmaxed over the real audio frames, normalised per frame (mean/std over the
tokens, as openai/whisper's timing.py), median-filtered (width 7) along time, averaged over
heads; dynamic time warping on the negated matrix maps tokens to encoder frames (20 ms each).
Token boundaries become word boundaries (faster-whisper's ``split_to_word_tokens``),
punctuation is merged into its word (faster-whisper's ``merge_punctuations``), then words are
put back into their segments: clipped into the segment's span and made monotonic.

It runs on the FINAL tokens in one extra pass, so speculative decoding cannot change it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import torch

from specscribe.models.types import Segment, Word

TOKENS_PER_SECOND = 50  # encoder frames per second (16 kHz / 160 hop / 2 conv stride)
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dynamic time warping of cost (N, M) from (0, 0) to (N-1, M-1); openai/whisper's dtw_cpu, with its
    tie-breaking (the diagonal or the token step only when strictly cheapest, else the time step).
    Returns (row indices, column indices).

    The accumulated cost is filled one anti-diagonal at a time, stored skewed (acc[i, j] at [i + j, i])
    so that each diagonal reads its three predecessors as slices; the same additions in the same order
    as the cell-by-cell loop, so the same bits and the same path."""
    n, m = cost.shape
    rows, cols = np.meshgrid(np.arange(1, n + 1), np.arange(1, m + 1), indexing="ij")  # (N, M) each
    skewed_cost = np.zeros((n + m + 1, n + 1))
    skewed_cost[rows + cols, rows] = cost
    skewed = np.full((n + m + 1, n + 1), np.inf)  # [d, i] = acc[i, d - i], acc 1-indexed with inf borders
    skewed[0, 0] = 0.0
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1) + 1
        c0, c1, c2 = skewed[d - 2, lo - 1 : hi - 1], skewed[d - 1, lo - 1 : hi - 1], skewed[d - 1, lo:hi]
        first = np.minimum(c0, c1)  # the strictly cheaper of c0, c1 if they differ; equal ones go to c2
        skewed[d, lo:hi] = skewed_cost[d, lo:hi] + np.where((c0 != c1) & (first < c2), first, c2)
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    acc[rows, cols] = skewed[rows + cols, rows]
    c0, c1, c2 = acc[:-1, :-1], acc[:-1, 1:], acc[1:, :-1]
    trace = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2))  # [i-1, j-1]
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = 2 if i == 0 else 1 if j == 0 else trace[i - 1, j - 1]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    out = np.array(path[::-1]).T
    return out[0], out[1]


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over the last axis with reflect padding (odd width), as openai/whisper's: the middle of
    each window after an odd-even transposition sort of the width shifted copies (elementwise min/max;
    several times faster than torch.median over unfolded windows, and the same values)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    shape, n = x.shape, x.shape[-1]
    padded = torch.nn.functional.pad(x.reshape(1, -1, n), (pad, pad), mode="reflect")[0]  # (rows, n + 2 pad)
    shifted = [padded[:, k : k + n] for k in range(width)]
    for phase in range(width):
        for k in range(phase % 2, width - 1, 2):
            low, high = shifted[k], shifted[k + 1]
            shifted[k], shifted[k + 1] = torch.minimum(low, high), torch.maximum(low, high)
    return shifted[pad].reshape(shape)


def alignment_matrix(scores: torch.Tensor, heads: Sequence[Sequence[int]], num_frames: int, width: int = 7) -> torch.Tensor:
    """scores (n_layers, H, T, S) pre-softmax cross-attention logits -> (T, num_frames // 2)."""
    weights = torch.stack([scores[layer, head] for layer, head in heads])  # (A, T, S)
    weights = weights[:, :, : num_frames // 2].float().softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = (weights - mean) / std
    return median_filter(weights, width).mean(dim=0)


def word_timings(
    words: Sequence[str],
    word_tokens: Sequence[Sequence[int]],
    matrix: torch.Tensor,  # (len(text) + 1, F): rows for <|notimestamps|> and the text tokens
    text_token_probs: Sequence[float],
) -> list[dict]:
    """openai/whisper's find_alignment after the model pass: DTW, then words at token jumps.
    ``words``/``word_tokens`` come from split_to_word_tokens(text + [eot]) (eot is the last word)."""
    if len(word_tokens) <= 1:
        return []
    text_idx, time_idx = dtw(-matrix.double().numpy())
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[boundaries[:-1]], jump_times[boundaries[1:]]
    probs = np.asarray(text_token_probs, dtype=np.float64)
    return [
        dict(word=w, tokens=list(t), start=float(s), end=float(e), probability=float(np.mean(probs[i:j])))
        for w, t, s, e, i, j in zip(words, word_tokens, starts, ends, boundaries[:-1], boundaries[1:])
    ]


def fit_words_to_segments(segments: Sequence[Segment], timings: list[dict], duration: float) -> tuple[Segment, ...]:
    """Merge punctuation, trim overlong words (faster-whisper's hacks), then give each segment
    its words: clipped into the segment's span, never going back in time, within [0, duration]."""
    from faster_whisper.transcribe import merge_punctuations

    lengths = np.array([t["end"] - t["start"] for t in timings])
    lengths = lengths[lengths.nonzero()]
    median = min(0.7, float(np.median(lengths))) if len(lengths) else 0.0
    longest = median * 2
    if len(lengths):
        for i in range(1, len(timings)):
            if timings[i]["end"] - timings[i]["start"] > longest:
                if timings[i]["word"] in ".。!！?？":
                    timings[i]["end"] = timings[i]["start"] + longest
                elif timings[i - 1]["word"] in ".。!！?？":
                    timings[i]["start"] = timings[i]["end"] - longest
    merge_punctuations(timings, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    out: list[Segment] = []
    index, last = 0, 0.0
    for seg in segments:
        words: list[Word] = []
        used = 0
        while index < len(timings) and used < len(seg.tokens):
            t = timings[index]
            used += len(t["tokens"])
            index += 1
            if not t["word"]:
                continue
            start = min(max(t["start"], seg.start, last), seg.end, duration)
            end = min(max(t["end"], start), seg.end, duration)
            words.append(Word(round(start, 3), round(end, 3), t["word"], round(t["probability"], 4)))
            last = end
        out.append(dataclasses.replace(seg, words=tuple(words)))
    return tuple(out)


def align_words(
    forward: Callable[[list[int], int], tuple[torch.Tensor, torch.Tensor]],
    sot_sequence: Sequence[int],
    no_timestamps: int,
    eot: int,
    split_to_word_tokens: Callable[[list[int]], tuple[list[str], list[list[int]]]],
    heads: Sequence[Sequence[int]],
    segments: Sequence[Segment],
    duration: float,
    num_frames: int,
    text_probs: Sequence[float] | None = None,
) -> tuple[Segment, ...]:
    """Word timings for ``segments`` (their text tokens, in order) of one window.

    forward: one pass of a FRESH target decoder session, (tokens, logits_from) -> (logits
        (T - logits_from, V), cross-attention logits (n_layers, H, T, S)), e.g.
        ``lambda t, f: session.forward(t, return_cross_attention=True, logits_from=f)``.
    num_frames: mel frames of real audio in the window (<= 3000).
    text_probs: the probability of each text token, if the caller has them (the decode's own:
        the spec engine keeps them); the pass then skips the output head. None: as
        openai/whisper, from this pass (softmax over the text tokens, no prompt).
    """
    text = [t for seg in segments for t in seg.tokens if t < eot]
    if not text:
        return tuple(segments)
    tokens = [*sot_sequence, no_timestamps, *text, eot]
    if text_probs is not None and len(text_probs) == len(text):
        _, scores = forward(tokens, len(tokens))  # (L, H, T, S); no logits
    else:
        logits, scores = forward(tokens, len(sot_sequence))  # (T - len(sot), V), (L, H, T, S)
        probs = logits.float()[:, :eot].softmax(dim=-1)  # rows predict text + eot
        text_probs = probs[torch.arange(len(text)), torch.tensor(text)].tolist()
    matrix = alignment_matrix(scores, heads, max(2, num_frames))[len(sot_sequence) : -1]  # (len(text)+1, F)
    words, word_tokens = split_to_word_tokens(text + [eot])
    timings = word_timings(words, word_tokens, matrix, text_probs)
    return fit_words_to_segments(segments, timings, duration)
