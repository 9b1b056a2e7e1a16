"""Beam search and best-of sampling (models/beam.py) on fake targets with scripted distributions, no weights.

The fake target's next-token log-probabilities are a pure function of the prefix, so a hypothesis
gets the right ones only if its KV cache holds exactly its own prefix: forks and reuse of caches
are checked by every test. ``reference_beam`` recomputes CTranslate2's beam search from prefixes
alone (no caches, no batching).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pytest
import torch

from specscribe.models.batch_decode import BatchDecoder
from specscribe.models.beam import BeamOptions, BeamSequence, SampleGroup, ranked_score
from specscribe.models.speculative import SpecOptions, SpecSequence

from test_batch_decode import Runner, run_all, sequence, alone

V, EOT = 8, 7
PROMPT = [5, 6]
Dist = Callable[[tuple[int, ...]], torch.Tensor]  # generated prefix -> logits (V,)


class DistSession:
    """A DecoderSession whose rows are dist(generated prefix); fork / copy_from copy the cache."""

    forks = 0
    hidden = None

    def __init__(self, dist: Dist, n_ctx: int = 64):
        self.dist, self.n_ctx, self.cache = dist, n_ctx, []

    @property
    def length(self) -> int:
        return len(self.cache)

    def forward(self, tokens: Sequence[int], logits_from: int = 0, prompt_rows: int | None = None) -> torch.Tensor:
        assert len(self.cache) + len(tokens) <= self.n_ctx
        rows = []
        for t in tokens:
            self.cache.append(t)
            rows.append(self.dist(tuple(self.cache[len(PROMPT):])))
        return torch.stack(rows)[logits_from:]

    def crop(self, length: int) -> None:
        del self.cache[length:]

    def fork(self) -> "DistSession":
        DistSession.forks += 1
        other = DistSession(self.dist, self.n_ctx)
        other.cache = list(self.cache)
        return other

    def copy_from(self, other: "DistSession") -> None:
        self.cache = list(other.cache)


class NoRules:
    def apply(self, logits, generated):
        return logits


def table(probs: dict[tuple[int, ...], dict[int, float]], default_eot: float = 0.9) -> Dist:
    """Next-token probabilities by prefix; unlisted prefixes end (end-of-text with default_eot)."""

    def dist(prefix: tuple[int, ...]) -> torch.Tensor:
        p = probs.get(prefix)
        if p is None:
            p = {EOT: default_eot, **{t: (1 - default_eot) / (V - 1) for t in range(V - 1)}}
        rest = max(1e-9, 1 - sum(p.values()))
        out = torch.full((V,), rest / max(1, V - len(p)))
        for t, q in p.items():
            out[t] = q
        return torch.log(out)

    return dist


def random_dist(seed: int, eot_bias: float) -> Dist:
    def dist(prefix: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((seed, prefix)) % (2**31))
        logits = torch.randn(V, generator=g) * 2
        logits[EOT] += eot_bias * len(prefix)  # sequences end sooner or later
        return logits

    return dist


def options(max_new: int = 12) -> SpecOptions:
    return SpecOptions(eot=EOT, max_new_tokens=max_new, n_ctx=64)


def beam(dist: Dist, size: int, patience: float = 1.0, length_penalty: float = 1.0, n_best: int = 1, max_new: int = 12):
    return BeamSequence(DistSession(dist), NoRules(), PROMPT, options(max_new),
                        BeamOptions(size, patience, length_penalty, n_best))


def decode_alone(seq):
    while not seq.done:
        parts = seq.plan()
        seq.consume([p.session.forward(p.tokens, logits_from=p.logits_from) for p in parts], 1.0)
    return seq.close()


def reference_beam(dist: Dist, size: int, patience: float, length_penalty: float, max_new: int, n_best: int = 1,
                   eot: int = EOT):
    """CTranslate2's BeamSearch from prefixes alone: (tokens with end-of-text if finished, logprobs) ranked.
    Scores add up in float32, ties go in (hypothesis, token) order, as models/beam.py documents."""
    live = [((), (), 0.0)]  # (tokens, logprobs, cumulative)
    ended, top_ended = [], False
    max_candidates = max(1, math.floor(size * patience + 0.5))
    for step in range(max_new):
        cands = []
        for toks, lps, score in live:
            lp = torch.log_softmax(dist(toks), -1)
            best = torch.topk(lp, min(2 * size + 8, len(lp))).indices.tolist()  # the global best 2B are among these
            cands += [(float(np.float32(score) + np.float32(lp[t])), toks, lps, t, float(lp[t])) for t in sorted(best)]
        cands = [c for c in cands if c[0] > -math.inf]
        cands.sort(key=lambda c: -c[0])  # stable: parent order, then token id
        cands = cands[: 2 * size]
        last = step + 1 == max_new
        nxt, secondary = [], size
        for k in range(min(size, len(cands))):
            score, toks, lps, t, lp = cands[k]
            if t == eot or last:
                ended.append((toks + (t,), lps + (lp,), t == eot, score))
                top_ended |= k == 0
                while secondary < len(cands):
                    secondary += 1
                    s2, toks2, lps2, t2, lp2 = cands[secondary - 1]
                    if t2 != eot:
                        nxt.append((toks2 + (t2,), lps2 + (lp2,), s2))
                        break
            else:
                nxt.append((toks + (t,), lps + (lp,), score))
        early = top_ended and len(ended) >= n_best  # length_penalty 0: CTranslate2's early exit
        stop = last or (early if length_penalty == 0 else len(ended) >= max_candidates)
        if stop or not nxt:
            break
        live = nxt

    def rank(e):
        toks, lps, fin, score = e
        return ranked_score(score, len(toks) - fin, length_penalty)

    return [e[:3] for e in sorted(ended, key=rank, reverse=True)]


def test_beam_finds_the_sequence_greedy_misses():
    # greedy takes 1 (0.6), then a weak tail; 2 (0.4) leads to a certain ending: 0.4 * 0.95 > 0.6 * 0.5
    dist = table({(): {1: 0.6, 2: 0.4}, (1,): {3: 0.5, 4: 0.5}, (2,): {3: 0.95}, (2, 3): {EOT: 0.99},
                  (1, 3): {EOT: 0.99}, (1, 4): {EOT: 0.99}})
    greedy = SpecSequence(DistSession(dist), NoRules(), PROMPT, None, options())
    assert decode_alone(greedy).tokens[:2] == (1, 3)
    assert decode_alone(beam(dist, 2)).tokens == (2, 3, EOT)


@pytest.mark.parametrize("size,patience,length_penalty", [(1, 1.0, 1.0), (2, 1.0, 1.0), (3, 1.0, 0.0), (4, 2.0, 1.0), (5, 1.0, 0.5)])
def test_beam_equals_the_reference_on_random_targets(size, patience, length_penalty):
    for seed in range(25):
        dist = random_dist(seed, eot_bias=0.6)
        got = decode_alone(beam(dist, size, patience, length_penalty, n_best=size, max_new=10))
        want = reference_beam(dist, size, patience, length_penalty, max_new=10, n_best=size)
        assert got.tokens == want[0][0] and got.finished == want[0][2], seed
        if size > 1:
            assert [a.tokens for a in got.alternatives] == [w[0] for w in want[:size]], seed
        else:
            assert got.alternatives == ()
        assert got.logprobs == pytest.approx(want[0][1], abs=1e-6)


def test_patience_lets_more_hypotheses_finish_before_the_search_stops():
    dist = random_dist(3, eot_bias=0.3)
    short = decode_alone(beam(dist, 3, patience=1.0, n_best=3))
    long = decode_alone(beam(dist, 3, patience=3.0, n_best=9))
    assert len(short.alternatives) == 3 and len(long.alternatives) == 9


def test_length_penalty_decides_between_a_short_and_a_long_ending():
    # "1 EOT": 0.5 * 0.5; "2 3 4 EOT": 0.45 * 0.7 ** 3, a lower total but a higher probability per token
    dist = table({(): {1: 0.5, 2: 0.45}, (1,): {EOT: 0.5}, (2,): {3: 0.7}, (2, 3): {4: 0.7}, (2, 3, 4): {EOT: 0.7}})
    assert decode_alone(beam(dist, 2, 2.0, length_penalty=0.0)).tokens == (1, EOT)  # the sum: short wins
    assert decode_alone(beam(dist, 2, 2.0, length_penalty=1.0)).tokens == (2, 3, 4, EOT)  # per token: long wins


def test_the_length_limit_finishes_every_beam():
    dist = table({}, default_eot=0.0)  # never ends
    res = decode_alone(beam(dist, 3, n_best=3, max_new=4))
    assert not res.finished and len(res.tokens) == 4
    assert len(res.alternatives) == 3 and all(len(a.tokens) == 4 and not a.finished for a in res.alternatives)


def test_beams_in_a_batch_decode_as_they_do_alone():
    runner = Runner()
    batch = BatchDecoder(block=4, runner=runner)
    dists = [random_dist(s, 0.5) for s in range(3)]
    joins = {0: [("b0", beam(dists[0], 4, n_best=4)), ("g", sequence(1))], 2: [("b1", beam(dists[1], 2))],
             5: [("b2", beam(dists[2], 3, patience=2.0))]}
    got = run_all(batch, joins)
    assert got["b0"] == decode_alone(beam(dists[0], 4, n_best=4)).tokens
    assert got["b1"] == decode_alone(beam(dists[1], 2)).tokens
    assert got["b2"] == decode_alone(beam(dists[2], 3, patience=2.0)).tokens
    assert got["g"] == alone(1)
    assert max(len(p) for p in runner.passes) > 4  # the beams' rows shared passes with the others


def test_forks_reuse_caches_of_dropped_beams():
    DistSession.forks = 0
    decode_alone(beam(random_dist(7, 0.1), 4, max_new=20))
    assert 0 < DistSession.forks <= 8  # the first fan-out forks; later steps reuse spare sessions


def test_best_of_picks_the_best_sample_and_is_reproducible():
    dist = random_dist(11, eot_bias=0.5)

    def group(seed, best_of=5, n_best=1):
        opts = SpecOptions(eot=EOT, max_new_tokens=12, n_ctx=64, temperature=1.0)
        return SampleGroup(DistSession(dist), NoRules(), PROMPT, opts, best_of, length_penalty=1.0, seed=seed, n_best=n_best)

    res = decode_alone(group(3, n_best=5))
    assert res.tokens == decode_alone(group(3)).tokens  # same seed, same samples
    scores = [ranked_score(sum(a.logprobs), len(a.tokens) - a.finished, 1.0) for a in res.alternatives]
    assert len(scores) == 5 and scores == sorted(scores, reverse=True) and res.tokens == res.alternatives[0].tokens
    seeds = {decode_alone(group(s, best_of=1)).tokens for s in range(8)}
    assert len(seeds) > 1  # it does sample


def test_beam_options_are_checked():
    with pytest.raises(ValueError):
        BeamOptions(beam_size=0)
    assert BeamOptions(5, 1.5).max_candidates == 8 and BeamOptions(5, 0.5).max_candidates == 3  # C++ rounding
