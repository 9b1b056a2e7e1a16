"""The continuous-batching step loop (models/batch_decode.py) on fake targets, no weights."""

from __future__ import annotations

import pytest

from specscribe.models.batch_decode import BatchDecoder
from specscribe.models.drafters import RandomDrafter
from specscribe.models.speculative import SpecOptions, SpecSequence, generate

from test_speculative import EOT, PROMPT, V, NoRules, ScriptDrafter, TableSession, oracle


def tale(offset: int):
    """A different deterministic text per sequence, ending after 10 + offset tokens."""

    def next_token(seq: tuple[int, ...]) -> int:
        n = len(seq) - len(PROMPT)
        return EOT if n >= 10 + offset else (seq[-1] * 5 + n + offset) % 20

    return next_token


class Runner:
    """A PassRunner over fake sessions that records the parts of every pass."""

    def __init__(self):
        self.passes: list[list[tuple[int, int]]] = []  # per pass: (session id, rows) per part

    def __call__(self, parts):
        self.passes.append([(id(p.session), len(p.tokens)) for p in parts])
        return [p.session.forward(p.tokens, logits_from=p.logits_from, prompt_rows=p.prompt_rows) for p in parts]


def sequence(offset: int, drafter=None, **kw) -> SpecSequence:
    opts = SpecOptions(eot=EOT, n_ctx=64, **kw)
    return SpecSequence(TableSession(tale(offset), 64), NoRules(), PROMPT, drafter, opts)


def alone(offset: int, drafter=None, **kw):
    opts = SpecOptions(eot=EOT, n_ctx=64, **kw)
    return generate(TableSession(tale(offset), 64), NoRules(), PROMPT, drafter, opts).tokens


def run_all(batch: BatchDecoder, joins: dict[int, list[tuple[str, SpecSequence]]]) -> dict[str, tuple[int, ...]]:
    """Step until empty; joins[i] are added before step i."""
    out, step = {}, 0
    while len(batch) or any(k >= step for k in joins):
        for tag, seq in joins.get(step, []):
            batch.add(tag, seq)
        out.update({tag: res.tokens for tag, res in batch.step()})
        step += 1
    return out


def test_sequences_joining_and_leaving_each_get_their_own_tokens():
    runner = Runner()
    batch = BatchDecoder(block=4, runner=runner)
    joins = {0: [("a", sequence(0)), ("b", sequence(5))], 3: [("c", sequence(2))], 12: [("d", sequence(1))]}
    got = run_all(batch, joins)
    assert got == {"a": alone(0), "b": alone(5), "c": alone(2), "d": alone(1)}
    sizes = [len(p) for p in runner.passes]
    assert max(sizes) == 3 and sizes[0] == 2 and sizes[-1] == 1  # c joined mid-way, a left early
    assert all(len(set(sid for sid, _ in p)) == len(p) for p in runner.passes)  # one part per sequence


def test_drafting_sequences_in_a_batch_stay_lossless():
    batch = BatchDecoder(block=8, runner=Runner())
    seqs = {f"s{i}": sequence(i, RandomDrafter(V, seed=i)) for i in range(3)}
    seqs["o"] = sequence(4, ScriptDrafter(oracle(tale(4))))
    got = run_all(batch, {0: list(seqs.items())})
    assert got == {"s0": alone(0), "s1": alone(1), "s2": alone(2), "o": alone(4)}


def test_in_a_batch_drafts_only_fill_the_last_block():
    runner = Runner()
    batch = BatchDecoder(block=8, runner=runner)
    for i in range(3):
        batch.add(i, sequence(i, ScriptDrafter(oracle(tale(i))), k_init=12, k_max=12, adaptive=False))
    batch.step()  # the prompts: 9 rows, 7 rows of padding to share
    batch.step()
    rows = [r for _, r in runner.passes[1]]
    assert sum(rows) == 8 and max(rows) - min(rows) <= 1  # 3 pending + 5 drafts, shared round-robin


def test_a_sequence_alone_drafts_as_far_as_its_controller_wants():
    runner = Runner()
    batch = BatchDecoder(block=4, runner=runner)
    batch.add("x", sequence(6, ScriptDrafter(oracle(tale(6))), k_init=10, k_max=10, adaptive=False))
    batch.step()
    batch.step()
    assert runner.passes[1][0][1] == 11  # 1 pending + 10 drafts, past the block


def test_cancel_drops_a_sequence_and_its_result():
    drafter = ScriptDrafter(oracle(tale(0)))
    batch = BatchDecoder(block=4, runner=Runner())
    batch.add("a", sequence(0, drafter))
    batch.add("b", sequence(1))
    batch.step()
    batch.cancel("a")
    batch.cancel("unknown")  # ignored
    got = run_all(batch, {})
    assert set(got) == {"b"} and drafter.finished


def test_a_tag_decodes_once_at_a_time():
    batch = BatchDecoder(block=4, runner=Runner())
    batch.add("a", sequence(0))
    with pytest.raises(ValueError, match="already"):
        batch.add("a", sequence(1))


def test_step_stats_count_rows_and_drafts():
    batch = BatchDecoder(block=4, runner=Runner())
    batch.add("a", sequence(0, ScriptDrafter(oracle(tale(0))), k_init=2, adaptive=False))
    batch.step()
    batch.step()
    first, second = batch.steps
    assert (first.sequences, first.rows, first.drafted) == (1, len(PROMPT) + 2, 2)
    assert (second.rows, second.drafted) == (3, 2)
    assert (batch.totals.passes, batch.totals.rows, batch.totals.drafted) == (2, len(PROMPT) + 5, 4)


def test_step_history_stays_bounded_while_totals_count_everything():
    batch = BatchDecoder(block=4, runner=Runner(), history=3)
    batch.add("a", sequence(0))
    while len(batch):
        batch.step()
    assert len(batch.steps) == 3 and batch.totals.passes == len(alone(0)) and batch.totals.max_sequences == 1


def test_in_a_batch_a_model_drafter_waits_and_a_lookup_drafts():
    class ModelScript(ScriptDrafter):
        cheap = False

    runner = Runner()
    batch = BatchDecoder(block=8, runner=runner)
    model = ModelScript(oracle(tale(0)))
    batch.add("model", sequence(0, model, k_init=4, adaptive=False))
    batch.add("lookup", sequence(1, ScriptDrafter(oracle(tale(1))), k_init=4, adaptive=False))
    batch.step()
    batch.step()
    assert model.asked == [] and runner.passes[1][1][1] == 5  # 1 pending + 4 drafted by the lookup
    batch.cancel("lookup")
    batch.step()  # alone now: the model drafter drafts
    assert model.asked and runner.passes[2][0][1] == 5
