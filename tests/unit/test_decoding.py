"""Prompt building, length limits, the reference loop and segment splitting, with scripted logits."""

from __future__ import annotations

import pytest
import torch

from specscribe.models.decoding import GenerateOptions, build_prompt, generate, max_new_tokens, split_segments
from specscribe.models.logits import RuleConfig, WhisperLogitRules

V, EOT, SOT, NO_TS, TS = 20, 10, 11, 12, 13


class ScriptedSession:
    """A DecoderSession whose argmax after n cached tokens is script[n - prompt_len]."""

    hidden = None

    def __init__(self, prompt_len: int, script: list[int]):
        self.prompt_len, self.script, self.length, self.calls = prompt_len, script, 0, []

    def forward(self, tokens):
        rows = []
        for _ in tokens:
            self.length += 1
            i = self.length - self.prompt_len
            row = torch.zeros(V)
            row[3] = 1.0  # a fallback text token
            if 0 <= i < len(self.script):
                row[self.script[i]] = 10.0
            rows.append(row)
        self.calls.append(list(tokens))
        return torch.stack(rows)

    def crop(self, length):
        self.length = length


def test_build_prompt_like_faster_whisper():
    assert build_prompt([SOT, 1, 2], [], 9, NO_TS, True) == [SOT, 1, 2]
    assert build_prompt([SOT, 1, 2], [], 9, NO_TS, False) == [SOT, 1, 2, NO_TS]
    prev = list(range(300))
    prompt = build_prompt([SOT], prev, 9, NO_TS, True, n_text_ctx=448)
    assert prompt[0] == 9 and prompt[1:-1] == prev[-223:] and prompt[-1] == SOT


def test_build_prompt_puts_hotwords_before_the_previous_text_like_faster_whisper():
    # faster-whisper's get_prompt: [sot_prev] + hotwords[: 448 // 2 - 1] + previous[-(448 // 2 - 1):] + sot...
    assert build_prompt([SOT], [], 9, NO_TS, True, hotword_tokens=[40, 41]) == [9, 40, 41, SOT]
    assert build_prompt([SOT], [7, 8], 9, NO_TS, False, hotword_tokens=[40]) == [9, 40, 7, 8, SOT, NO_TS]
    long = build_prompt([SOT], [7], 9, NO_TS, True, hotword_tokens=list(range(100, 400)))
    assert long[1:] == list(range(100, 323)) + [SOT]  # hotwords fill the cap: no room for the history


def test_hotwords_and_history_together_leave_room_to_generate():
    """Both at their cap made a 451-token prompt in a 448-token context: a decode with nothing to generate,
    empty and unflagged. Together they now share Whisper's cap, the newest history kept."""
    prompt = build_prompt([SOT, 1, 2], list(range(1000, 1300)), 9, NO_TS, False, hotword_tokens=list(range(100, 120)))
    assert prompt == [9, *range(100, 120), *range(1097, 1300), SOT, 1, 2, NO_TS]
    assert len(prompt) - 5 == 448 // 2 - 1
    assert max_new_tokens(len(prompt), 224) == 221


def test_decode_request_checks_its_search_options():
    from specscribe.models.types import DecodeRequest

    assert DecodeRequest(beam_size=5, n_best=5).n_best == 5
    assert DecodeRequest(temperature=0.5, best_of=3, n_best=3).best_of == 3
    for bad in ({"beam_size": 0}, {"best_of": 0}, {"n_best": 2}, {"patience": 0.0}):
        with pytest.raises(ValueError):
            DecodeRequest(**bad)


def test_max_new_tokens_like_ctranslate2():
    assert max_new_tokens(4, 224) == 224
    assert max_new_tokens(300, 224) == 149  # 448 - (300 - 1)
    assert max_new_tokens(4, 10) == 10


def test_ct2_max_length_gives_the_requested_cap_whatever_the_prompt():
    from specscribe.models.ct2_engine import ct2_max_length

    def ct2_cap(max_length, prompt_len):  # what CTranslate2 generates at most for Whisper
        return min(max_length // 2, max_length - prompt_len + 1)

    for n in (1, 16, 26, 100, 224):
        for p in (1, 4, 30, 60, 120, 200):
            got = ct2_cap(ct2_max_length(n, p), p)
            assert got == min(n, 224, 449 - p), (n, p)  # > 0: a long prompt before a short window works
    assert ct2_max_length(16, 4) == 32  # faster-whisper's usual case: 2 * N


def test_generate_greedy_stops_at_eot_and_counts_passes():
    rules = WhisperLogitRules(RuleConfig(n_vocab=V, eot=EOT, no_timestamps=NO_TS, timestamps=False))
    session = ScriptedSession(2, [1, 2, 5, EOT])
    gen = generate(session, [SOT, NO_TS], rules, GenerateOptions(max_new_tokens=50, eot=EOT, sot_index=0, no_speech=7))
    assert gen.tokens == (1, 2, 5) and gen.finished
    assert session.calls == [[SOT, NO_TS], [1], [2], [5]]
    assert gen.passes == 3
    assert gen.avg_logprob == gen.sum_logprob / 4 and gen.sum_logprob < 0
    assert 0 < gen.no_speech_prob < 1


def test_generate_length_limit_keeps_last_token():
    rules = WhisperLogitRules(RuleConfig(n_vocab=V, eot=EOT, no_timestamps=NO_TS, timestamps=False))
    gen = generate(ScriptedSession(1, [1, 2, 5, EOT]), [SOT], rules, GenerateOptions(max_new_tokens=2, eot=EOT))
    assert gen.tokens == (1, 2) and not gen.finished


def test_split_segments_like_faster_whisper():
    toks = [TS, 1, 2, TS + 3, TS + 3, 4, TS + 5]  # closed pair, then a single timestamp ending
    spans = split_segments(toks, TS, duration=5.0)
    assert [(s.start, s.end) for s in spans] == [(0.0, 0.06), (0.06, 0.1)]
    assert spans[1].tokens == (TS + 3, 4, TS + 5)
    spans = split_segments([1, 2, 3], TS, duration=5.0)  # no timestamps: the whole window
    assert [(s.start, s.end) for s in spans] == [(0.0, 5.0)]
