"""The speculative loop on a fake target (a table: next token as a function of the prefix), no weights."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import pytest
import torch

from specscribe.models.drafters import Draft, RandomDrafter
from specscribe.models.draft_policy import DraftLength
from specscribe.models.speculative import SpecOptions, generate

V = 32
EOT = 31
TS = 24  # ids >= TS are "timestamps" (EOT excluded)
PROMPT = [20, 21, 22]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TableSession:
    """A DecoderSession whose row i puts its maximum on next_token(prefix up to i).

    Background logits fall slowly with the id, so when rules forbid the top token the argmax
    is the smallest allowed id. Records every forward and every crop (with the cache after it).
    """

    hidden = None  # no hidden states: feature drafters draft nothing here

    def __init__(self, next_token: Callable[[tuple[int, ...]], int], n_ctx: int = 64, clock=None, pass_s=0.010):
        self.next_token = next_token
        self.n_ctx = n_ctx
        self.cache: list[int] = []
        self.forwards: list[list[int]] = []
        self.logits_from: list[int] = []
        self.crops: list[tuple[int, tuple[int, ...]]] = []
        self.clock, self.pass_s = clock, pass_s

    @property
    def length(self) -> int:
        return len(self.cache)

    def forward(self, tokens: Sequence[int], logits_from: int = 0, prompt_rows: int | None = None) -> torch.Tensor:
        if len(self.cache) + len(tokens) > self.n_ctx:
            raise ValueError("beyond the context")
        self.forwards.append(list(tokens))
        self.logits_from.append(logits_from)
        rows = []
        for t in tokens:
            self.cache.append(t)
            row = -0.01 * torch.arange(V, dtype=torch.float32)
            row[self.next_token(tuple(self.cache))] = 5.0
            rows.append(row)
        if self.clock is not None:
            self.clock.now += self.pass_s
        return torch.stack(rows[logits_from:])

    def crop(self, length: int) -> None:
        assert 0 <= length <= len(self.cache)
        self.cache = self.cache[:length]
        self.crops.append((length, tuple(self.cache)))


class NoRules:
    def apply(self, logits, generated):
        return logits


class TimestampRules:
    """A miniature of Whisper's: timestamps never decrease, and two timestamps come in a row only
    as a pair (after a pair, text must follow). Depends on `generated` only, like the real ones."""

    def apply(self, logits, generated):
        logits = logits.clone()
        stamps = [t for t in generated if TS <= t < EOT]
        if stamps:
            logits[TS : stamps[-1]] = -math.inf
        if len(generated) >= 2 and all(TS <= t < EOT for t in generated[-2:]):
            logits[TS:EOT] = -math.inf
        return logits


def story(seq: tuple[int, ...]) -> int:
    """Deterministic text: counts up after the prompt, end-of-text after 30 tokens."""
    n = len(seq) - len(PROMPT)
    return EOT if n >= 30 else (seq[-1] * 7 + n) % 20


def reference(next_token, rules, prompt=PROMPT, max_new=224, n_ctx=64):
    """The target's own plain loop: one token per pass."""
    sess = TableSession(next_token, n_ctx)
    logits = sess.forward(prompt)[-1]
    out, lps = [], []
    limit = min(max_new, n_ctx - len(prompt) + 1)
    while len(out) < limit:
        filtered = rules.apply(logits, out)
        tok = int(filtered.argmax())
        lps.append(float(torch.log_softmax(filtered, -1)[tok]))
        out.append(tok)
        if tok == EOT or len(out) >= limit:
            break
        logits = sess.forward([tok])[-1]
    return out, lps


class ScriptDrafter:
    """Proposes from a function of the generated tokens; records the k it was asked for."""

    name = "script"
    cheap = True  # a lookup, as far as the batch is concerned (tests/unit/test_batch_decode.py)

    def __init__(self, fn: Callable[[list[int], int], list[int]], clock=None, cost_s=0.0):
        self.fn, self.asked, self.accepted_calls = fn, [], []
        self.clock, self.cost_s = clock, cost_s
        self.finished = False

    def begin(self, prompt, temperature=0.0, generator=None):
        self.prompt = list(prompt)

    def propose(self, generated, k):
        self.asked.append((len(generated), k))
        if self.clock is not None:
            self.clock.now += self.cost_s * k
        return Draft(tuple(self.fn(list(generated), k)))

    def accept(self, generated, features=None):
        self.accepted_calls.append(list(generated))

    def finish(self):
        self.finished = True


def oracle(next_token=story, prompt=PROMPT):
    """A perfect drafter that ignores the rules: the table's own continuation."""

    def fn(generated, k):
        seq, out = list(prompt) + generated, []
        for _ in range(k):
            out.append(next_token(tuple(seq)))
            seq.append(out[-1])
        return out

    return fn


def run(drafter, rules=None, **kw):
    rules = rules or NoRules()
    opts = SpecOptions(eot=EOT, n_ctx=kw.pop("n_ctx", 64), **kw)
    sess = TableSession(story, opts.n_ctx)
    return generate(sess, rules, PROMPT, drafter, opts), sess


def test_plain_equals_reference_and_counts_one_token_per_pass():
    ref, ref_lps = reference(story, NoRules())
    res, sess = run(None)
    assert list(res.tokens) == ref and res.finished
    assert res.logprobs == pytest.approx(ref_lps)
    assert res.stats.target_passes == len(ref) == res.stats.tokens
    assert res.stats.drafted == 0 and all(len(f) == 1 for f in sess.forwards[1:])


def test_full_acceptance_gives_bonus_token_each_round():
    drafter = ScriptDrafter(oracle())
    res, sess = run(drafter, k_init=4, adaptive=False)
    ref, _ = reference(story, NoRules())
    assert list(res.tokens) == ref
    # 31 tokens: six rounds of 4 accepted + 1 bonus, then end-of-text accepted as the first of 4 drafts
    assert (res.stats.target_passes, res.stats.drafted, res.stats.accepted) == (7, 28, 25)
    assert sess.forwards[1][0] == ref[4]  # second pass starts with the bonus token
    assert drafter.finished


def test_early_mismatch_keeps_prefix_and_correction():
    ref, _ = reference(story, NoRules())

    def wrong_third(generated, k):
        good = oracle()(generated, k)
        return good[:2] + [(good[2] + 1) % 20] + good[3:] if k >= 3 else good

    drafter = ScriptDrafter(wrong_third)
    res, sess = run(drafter, k_init=4, adaptive=False)
    assert list(res.tokens) == ref
    # first round: 2 accepted + the correction = 3 tokens
    assert drafter.asked[0] == (0, 4) and drafter.accepted_calls[0] == ref[:3]
    assert drafter.asked[1][0] == 3  # the next round drafts after those 3 tokens
    assert res.stats.accepted < res.stats.drafted


def test_eot_inside_draft_ends_decode_and_ignores_the_rest():
    def eot_then_junk(generated, k):
        good = oracle()(generated, k)
        if EOT in good:
            i = good.index(EOT)
            good = good[: i + 1] + [5] * (k - i - 1)
        return good

    res, sess = run(ScriptDrafter(eot_then_junk), k_init=12, adaptive=False)
    ref, _ = reference(story, NoRules())
    assert list(res.tokens) == ref and res.tokens[-1] == EOT and res.finished


def test_timestamp_tokens_in_draft_follow_the_rules():
    def stamps(seq):
        n = len(seq) - len(PROMPT)
        if n >= 12:
            return EOT
        # the table wants timestamps that go backwards and three in a row; the rules forbid both
        return [TS + 3, 3, 4, TS + 5, TS + 1, TS + 2, 7, TS + 2, TS + 6, 9, 1, TS + 4][n]

    rules = TimestampRules()
    ref, ref_lps = reference(stamps, rules)
    assert ref != [stamps(tuple(PROMPT) + (0,) * i) for i in range(len(ref))]  # the rules changed something
    opts = SpecOptions(eot=EOT, k_init=6, adaptive=False)
    sess = TableSession(stamps)
    res = generate(sess, rules, PROMPT, ScriptDrafter(oracle(stamps)), opts)
    assert list(res.tokens) == ref
    assert res.logprobs == pytest.approx(ref_lps)
    assert res.stats.accepted < res.stats.drafted  # the rule-breaking drafts were rejected


@pytest.mark.parametrize("max_new,n_ctx", [(5, 64), (224, 11), (1, 64)])
def test_length_limit_cuts_exactly_like_the_plain_loop(max_new, n_ctx):
    ref, _ = reference(story, NoRules(), max_new=max_new, n_ctx=n_ctx)
    res, sess = run(ScriptDrafter(oracle()), k_init=12, adaptive=False, max_new_tokens=max_new, n_ctx=n_ctx)
    assert list(res.tokens) == ref and not res.finished
    assert max(len(c) for _, c in sess.crops) <= n_ctx  # TableSession also raises beyond n_ctx


def test_caches_are_cropped_to_the_accepted_tokens():
    drafter = ScriptDrafter(lambda g, k: [(t + 1) % 20 for t in oracle()(g, k)][:1] + oracle()(g + [0], k)[: k - 1])
    res, sess = run(drafter, k_init=3, adaptive=False)
    full = PROMPT + list(res.tokens)
    for length, cache in sess.crops:
        assert cache == tuple(full[:length])
    # after each round: the prompt and all emitted tokens but the last
    for generated in drafter.accepted_calls:
        assert any(length == len(PROMPT) + len(generated) - 1 for length, _ in sess.crops)
        assert generated == list(res.tokens[: len(generated)])


def test_random_drafter_is_lossless_and_switches_itself_off():
    clock = FakeClock()
    drafter = ScriptDrafter(lambda g, k: RandomDrafter(V, seed=len(g)).propose(g, k).tokens, clock, cost_s=0.002)
    opts = SpecOptions(eot=EOT, k_init=4, min_rounds=4, probe_after=5)
    sess = TableSession(story, clock=clock)
    res = generate(sess, NoRules(), PROMPT, drafter, opts, clock=clock)
    assert list(res.tokens) == reference(story, NoRules())[0]
    lengths = [g for g, _ in drafter.asked]
    # the prompt pass (not measured), 4 losing rounds, 5 plain steps without the drafter, a probe
    assert lengths[:6] == [0, 1, 2, 3, 4, 10]
    assert [k for _, k in drafter.asked[:6]] == [4, 3, 2, 1, 1, 4]


def test_k_grows_on_full_acceptance_within_bounds():
    drafter = ScriptDrafter(oracle())
    res, _ = run(drafter, k_init=2, k_max=7, max_new_tokens=100)
    ks = [k for _, k in drafter.asked]
    # every round is fully accepted: k grows by 2 a round and stops at k_max (31 tokens: 3+5+7+8+8)
    assert ks == [2, 4, 6, 7, 7]


def test_draft_length_controller_switch_off_and_probe():
    ctl = DraftLength(SpecOptions(eot=0, k_init=4, k_min=1, min_rounds=2, probe_after=3))
    ctl.update(0, 0, 1, verify_ms=10, draft_ms=0)  # a plain step measures 10 ms
    ctl.update(4, 0, 1, verify_ms=11, draft_ms=3)
    assert ctl.k == 3 and ctl.enabled
    ctl.update(3, 0, 1, verify_ms=11, draft_ms=3)  # two losing rounds
    assert not ctl.enabled and ctl.next_k() == 0
    for _ in range(3):
        ctl.update(0, 0, 1, verify_ms=10, draft_ms=0)
    assert ctl.enabled and ctl.next_k() == 4 and ctl.pause == 6
    ctl.update(4, 4, 5, verify_ms=11, draft_ms=1)  # winning rounds keep it on and grow k
    ctl.update(6, 6, 7, verify_ms=11, draft_ms=1)
    assert ctl.enabled and ctl.k == 8


def test_keep_prompt_row_returns_the_raw_prompt_logits():
    res, sess = run(ScriptDrafter(oracle()), keep_prompt_row=0)
    assert int(res.prompt_row_logits.argmax()) == story(tuple(PROMPT[:1]))
    assert sess.logits_from[0] == 0  # the kept row needs the head
    want, _ = reference(story, NoRules())
    assert list(res.tokens) == want


def test_prompt_rows_skip_the_output_head():
    res, sess = run(ScriptDrafter(oracle()))
    assert sess.logits_from[0] == len(PROMPT) - 1  # only the last prompt row predicts a token
    assert all(f == 0 for f in sess.logits_from[1:])
    want, _ = reference(story, NoRules())
    assert list(res.tokens) == want


# --- sampling: the output distribution is the target's ---------------------------------------

SV = 4  # sampled vocab; EOT is never likely


def _p_logits(last: int) -> torch.Tensor:
    table = torch.tensor([[2.0, 0.5, 0.0, 1.0], [0.0, 1.5, 1.0, 0.2], [1.0, 1.0, 0.1, 2.0], [0.3, 0.0, 2.0, 1.0]])
    row = torch.full((V,), -1e9)
    row[:SV] = table[last % SV]
    return row


class LogitSession(TableSession):
    def forward(self, tokens, logits_from=0, prompt_rows=None):
        self.cache += list(tokens)
        return torch.stack([_p_logits(self.cache[i]) for i in range(len(self.cache) - len(tokens) + logits_from, len(self.cache))])


class SamplingDrafter:
    """Samples from its own (different) distribution q and reports it."""

    name = "q"
    cheap = False
    Q = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1], [0.05, 0.05, 0.1, 0.8]])

    def begin(self, prompt, temperature=0.0, generator=None):
        self.prompt, self.gen = list(prompt), generator

    def propose(self, generated, k):
        last, toks, probs = (self.prompt + list(generated))[-1], [], []
        for _ in range(k):
            q = torch.zeros(V)
            q[:SV] = self.Q[last % SV]
            last = int(torch.multinomial(q, 1, generator=self.gen))
            toks.append(last)
            probs.append(q)
        return Draft(tuple(toks), torch.stack(probs))

    def accept(self, generated, features=None):
        pass

    def finish(self):
        pass


@pytest.mark.parametrize("drafter_kind", ["sampled", "point"])
def test_sampling_matches_target_distribution(drafter_kind):
    temperature, n = 0.8, 2000
    gen = torch.Generator().manual_seed(1234)
    if drafter_kind == "sampled":
        drafter = SamplingDrafter()
    else:  # a deterministic guess (point mass): always proposes token 1, then 3
        drafter = ScriptDrafter(lambda g, k: [1, 3][:k])
    opts = SpecOptions(eot=EOT, max_new_tokens=3, temperature=temperature, k_init=2, adaptive=False)
    pairs, thirds = torch.zeros(SV, SV), torch.zeros(SV)
    for _ in range(n):
        res = generate(LogitSession(story), NoRules(), [0], drafter, opts, generator=gen)
        a, b, c = res.tokens
        pairs[a, b] += 1
        thirds[c] += 1
        assert res.stats.drafted >= 2  # the first round drafts two tokens

    p = torch.stack([torch.softmax(_p_logits(i)[:SV] / temperature, -1) for i in range(SV)])  # (SV, SV)
    exp_pairs = p[0][:, None] * p * n  # P(a) P(b | a)
    exp_thirds = (p[0] @ p @ p) * n  # P(c)
    chi2_pairs = float(((pairs - exp_pairs) ** 2 / exp_pairs).sum())
    chi2_thirds = float(((thirds - exp_thirds) ** 2 / exp_thirds).sum())
    # 0.999 quantiles: chi-square(15) 37.70 (16 pair cells), chi-square(3) 16.27
    assert chi2_pairs < 37.70, chi2_pairs
    assert chi2_thirds < 16.27, chi2_thirds


def test_sampling_with_the_draft_distribution_alone_would_fail_the_test():
    """The chi-square check above can fail: q's own distribution is far from p."""
    temperature, n = 0.8, 2000
    gen = torch.Generator().manual_seed(7)
    counts = torch.zeros(SV)
    for _ in range(n):
        counts[int(torch.multinomial(SamplingDrafter.Q[0], 1, generator=gen))] += 1
    expected = torch.softmax(_p_logits(0)[:SV] / temperature, -1) * n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 > 16.27  # 0.999 quantile of chi-square(3)


def test_a_prompt_longer_than_the_context_is_an_error_not_an_empty_decode():
    """Before, a 451-token prompt in a 448-token context came back as no tokens at all, which every guard
    takes for silence; the plain loop (decoding.generate) raises."""
    from specscribe.models.beam import BeamOptions, BeamSequence

    too_long = list(PROMPT) + [1] * 64
    opts = SpecOptions(eot=EOT, n_ctx=64)
    with pytest.raises(ValueError, match="leaves nothing to generate"):
        generate(TableSession(story, 64), NoRules(), too_long, None, opts)
    with pytest.raises(ValueError, match="leaves nothing to generate"):
        BeamSequence(TableSession(story, 64), NoRules(), too_long, opts, BeamOptions(beam_size=2))
    res, _ = run(None, n_ctx=len(PROMPT))  # a prompt that fills the context still gets its one token
    assert len(res.tokens) == 1
