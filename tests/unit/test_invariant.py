"""Batch invariance (models/invariant.py) on a small random Whisper decoder, bit for bit.

The property the speculative loop and the batched engine rely on: a row's logits are the same
bits whatever shares its pass (other sequences, its own drafted tokens, the row count), and a
position gives the same bits as a one-token step or as row j of a verify block. The same checks
run on the real model in tests/integration/test_row_invariance.py.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specscribe.models import invariant
from specscribe.models.compute import PackedLinear, int8_fast, pack_decoder
from specscribe.models.int8 import quantize_decoder
from specscribe.models.invariant import PassShape, RowBlocks, attend, attend_blocks, causal_mask, stacked_attention
from specscribe.models.weights import WhisperDims
from specscribe.models.whisper import PassPart, WhisperModel

DIMS = WhisperDims(n_mels=8, n_audio_ctx=300, n_audio_state=512, n_audio_head=8, n_audio_layer=1,
                   n_vocab=2000, n_text_ctx=96, n_text_state=512, n_text_head=8, n_text_layer=2)  # fmt: skip
DTYPES = [torch.float32, torch.bfloat16]
# decoders: the dtypes, and "int8" (float32 with row-scaled int8 linears and head, compute type int8)
DECODERS = DTYPES + (["int8"] if int8_fast() else [])


def _decoder(dtype: torch.dtype | str, rows: int = 8, packed: bool = True, query_block: int = 1,
             whole: bool | None = False):
    torch.manual_seed(0)
    model = WhisperModel(DIMS).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    if dtype == "int8":
        quantize_decoder(model.decoder)
        dtype = torch.float32
    model = model.to(dtype)
    model.decoder.pass_shape = PassShape(rows=rows, key_block=16, query_block=query_block, whole=whole)
    if packed:
        pack_decoder(model.decoder, rows)
    encs = [torch.randn(1, DIMS.n_audio_ctx, DIMS.n_audio_state).to(dtype) for _ in range(4)]
    return model.decoder, encs


@pytest.mark.parametrize("dtype", DECODERS)
@pytest.mark.parametrize("companions", [1, 7, 31])
@pytest.mark.parametrize("rows, query_block", [(8, 1), (8, 4), (16, 1)])  # the shapes models/compute.py picks
@pytest.mark.parametrize("prompt_len", [3, 21])  # a prompt within a block, and one over a block
@pytest.mark.parametrize("whole", [False, None])  # blocks; whole calls where this machine's probe allows them
def test_a_row_alone_equals_the_row_among_random_companions(dtype, companions, rows, query_block, prompt_len, whole,
                                                            tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCRIBE_HOME", str(tmp_path))  # the probe's answer (models/row_calls.py) kept there
    decoder, encs = _decoder(dtype, rows=rows, query_block=query_block, whole=whole)
    rng = random.Random(companions)
    prompt, text = list(range(1, prompt_len + 1)), [rng.randrange(DIMS.n_vocab) for _ in range(12)]
    alone = decoder.session(encs[0])
    want = [alone.forward(prompt)[-1]] + [alone.forward([t])[-1] for t in text]  # one token per pass
    main = decoder.session(encs[0])
    parts = [PassPart(main, prompt + text, logits_from=len(prompt) - 1, prompt_rows=len(prompt))]
    for c in range(companions):
        other = decoder.session(encs[1 + c % 3])
        if c % 2:
            other.forward([rng.randrange(DIMS.n_vocab) for _ in range(rng.randint(1, 30))])
        parts.append(PassPart(other, [rng.randrange(DIMS.n_vocab) for _ in range(rng.randint(1, 5))]))
    rng.shuffle(parts)
    got = decoder.run_pass(parts)[[p.session for p in parts].index(main)].logits
    assert decoder.pass_shape.whole in (True, False)  # probed (whole None) at the first pass of several calls
    for i, row in enumerate(want):
        assert torch.equal(got[i], row), f"row {i} differs by {(got[i] - row).abs().max()}"


@pytest.mark.parametrize("dtype", DECODERS)
@pytest.mark.parametrize("query_block", [1, 4])
def test_rejected_cache_slots_do_not_change_the_next_logits(dtype, query_block):
    decoder, encs = _decoder(dtype, query_block=query_block)
    a, b = decoder.session(encs[0]), decoder.session(encs[0])
    a.forward([1, 2, 3, 4])
    b.forward([1, 2, 3, 4, 9, 9, 9])  # three drafted tokens, all rejected
    b.crop(4)
    for keys in b.cache.keys:
        keys[:, :, 4:] = 1e3  # garbage past the length (finite, as real stale keys are)
    assert torch.equal(a.forward([5])[-1], b.forward([5])[-1])


@pytest.mark.parametrize("dtype", DECODERS)
@pytest.mark.parametrize("query_block", [1, 4])
def test_prompt_rows_give_the_same_bits_with_drafts_after_them(dtype, query_block):
    decoder, encs = _decoder(dtype, query_block=query_block)
    prompt = list(range(10, 30))  # a prompt longer than a block and than a key block
    plain = decoder.session(encs[1]).forward(prompt)
    drafted = decoder.session(encs[1]).forward(prompt + [7, 8, 9], prompt_rows=len(prompt))
    assert torch.equal(drafted[: len(prompt)], plain)


def test_without_a_pass_shape_the_pass_is_one_call_and_close():
    decoder, encs = _decoder(torch.float32, packed=False)
    want = decoder.session(encs[0]).forward([1, 2, 3, 4, 5])
    decoder.pass_shape = None
    got = decoder.session(encs[0]).forward([1, 2, 3, 4, 5])
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_row_blocks_pad_and_map():
    blocks = RowBlocks(4, 6)
    x = blocks.pad(torch.ones(6, 3))
    assert x.shape == (8, 3) and x[6:].sum() == 0
    seen = []
    out = blocks.map(lambda b: seen.append(b.shape[0]) or b * 2, x)
    assert seen == [4, 4] and torch.equal(out, x * 2)
    assert RowBlocks(0, 5).pad(torch.ones(5, 2)).shape == (5, 2)
    grouped = RowBlocks(4, 14, groups=(5, 0, 3))  # two prompts (one call each), then 6 rows in blocks of 4
    assert grouped.padded == 16
    seen.clear()
    out = grouped.map(lambda b: seen.append(b.shape[0]) or b * 2, grouped.pad(torch.ones(14, 3)))
    assert seen == [5, 3, 4, 4] and out.shape == (16, 3)
    assert RowBlocks(0, 14, groups=(5,)).groups == ()  # no blocking, no groups


def test_whole_row_blocks_pad_to_a_multiple_of_the_block_and_call_once_per_chunk():
    grouped = RowBlocks(4, 14, groups=(5, 0, 3), whole=True)  # groups need no call of their own
    assert grouped.padded == 16 and grouped.groups == ()
    seen = []
    out = grouped.map(lambda b: seen.append(b.shape[0]) or b * 2, grouped.pad(torch.ones(14, 3)))
    assert seen == [16] and torch.equal(out, torch.full((16, 3), 2.0).index_fill(0, torch.arange(14, 16), 0))
    big = RowBlocks(8, 1000, whole=True)
    seen.clear()
    big.map(lambda b: seen.append(b.shape[0]) or b, big.pad(torch.ones(1000, 2)))
    assert big.padded == 1000 and seen == [invariant.WHOLE_ROWS, 1000 - invariant.WHOLE_ROWS]
    assert RowBlocks(4, 14, groups=(5, 0, 3)).calls == 4 and RowBlocks(4, 3).calls == 1


def test_the_whole_calls_probe_finds_a_function_whose_rows_depend_on_the_row_count():
    exact = [(lambda b: b * 2, 16), (lambda b: b[:, :4] - 1, 16)]  # row-wise, exact in any call
    assert invariant.whole_calls_keep_bits(exact, 8, torch.bfloat16)
    assert 24 in invariant.probe_rows(8) and 8 in invariant.probe_rows(8) and max(invariant.probe_rows(8)) == 512
    assert all(n % 16 == 0 for n in invariant.probe_rows(16))
    for fn in (lambda b: b * b.shape[0], lambda b: b + (b.shape[0] == 24)):  # every count; one count alone
        assert not invariant.whole_calls_keep_bits([*exact, (fn, 16)], 8, torch.float32)
    assert not invariant.whole_calls_keep_bits([(lambda b: b + (b.shape[0] == 1), 16)], 1, torch.float32)


@pytest.mark.parametrize("query_block", [1, 4])
def test_attend_groups_the_prompt_and_puts_each_later_row_in_its_position_block(query_block):
    torch.manual_seed(1)
    q, k, v = torch.randn(6, 2, 8), torch.randn(1, 2, 32, 8), torch.randn(1, 2, 32, 8)
    shape = PassShape(rows=4, key_block=12, query_block=query_block)
    assert [shape.key_length(p, 32) for p in (10, 11, 12, 23, 24, 40)] == [12, 12, 24, 24, 32, 32]
    got = attend(q, k, v, None, start=10, group=2, shape=shape)
    b = shape.query_block
    for i in range(2, 6):  # every later row equals its own position's block with the row alone in it
        p = 10 + i
        b0, n = p - p % b, shape.key_length(p - p % b + b - 1, 32)
        alone = torch.zeros(b, 2, 8)
        alone[p - b0] = q[i]
        mask = torch.arange(n)[None] <= torch.arange(b0, b0 + b)[:, None]
        one = attend(alone, k[:, :, :n], v[:, :, :n], mask)
        assert torch.equal(got[i], one[p - b0])
    mask = torch.arange(32)[None] <= torch.arange(10, 16)[:, None]
    full = attend(q, k, v, mask)  # masking makes the key length irrelevant up to rounding
    torch.testing.assert_close(got, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [1, 4])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("probe", ["as found", "says no"])
def test_stacked_blocks_each_get_the_bits_of_a_call_of_their_own(dtype, size, masked, probe, monkeypatch):
    """The property the CPU path of stacked_attention rests on: one call over B blocks gives every block
    the bits of the block's own call, whatever B and its companions (1 to 40 blocks); where the probe finds
    otherwise (here: told so), a call per block."""
    if probe == "says no":
        monkeypatch.setattr(invariant, "stacking_keeps_bits", lambda *args: False)
    torch.manual_seed(4)
    n = 128
    k, v = torch.randn(1, 8, n, 64, dtype=dtype), torch.randn(1, 8, n, 64, dtype=dtype)
    block = torch.randn(size, 8, 64, dtype=dtype)
    mask = causal_mask(77, size, n, "cpu") if masked else None
    alone = F.scaled_dot_product_attention(block.transpose(0, 1)[None], k, v, attn_mask=mask)[0].transpose(0, 1)
    for count in (1, 2, 9, 40):
        blocks = torch.randn(count, size, 8, 64, dtype=dtype)
        place = count // 2
        blocks[place] = block
        masks = None
        if masked:
            masks = torch.stack([causal_mask(int(p), size, n, "cpu") for p in torch.randint(0, n - size, (count,))])
            masks[place] = mask
        got = stacked_attention(blocks, k, v, masks)
        assert got.shape == (count, size, 8, 64)
        assert torch.equal(got[place], alone), count


def test_a_query_block_must_divide_the_key_block():
    with pytest.raises(ValueError):
        PassShape(key_block=64, query_block=3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attend_blocks_gives_a_row_the_same_bits_at_every_place_in_its_block(dtype):
    torch.manual_seed(2)
    k, v = torch.randn(1, 8, 300, 64, dtype=dtype), torch.randn(1, 8, 300, 64, dtype=dtype)
    row = torch.randn(1, 8, 64, dtype=dtype)
    want = attend_blocks(row, k, v, 4)[0]  # alone: three zero rows of padding
    for t in (2, 4, 7, 9):
        for place in range(t):
            q = torch.randn(t, 8, 64, dtype=dtype)
            q[place] = row[0]
            assert torch.equal(attend_blocks(q, k, v, 4)[place], want), (t, place)
    close = F.scaled_dot_product_attention(row.transpose(0, 1)[None], k, v)[0].transpose(0, 1)[0]
    torch.testing.assert_close(want, close, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attend_blocks_takes_a_prompt_group_in_one_call(dtype):
    """The prompt's rows are one call (as a prefill always makes them); the rows after it keep their block bits."""
    torch.manual_seed(3)
    k, v = torch.randn(1, 8, 300, 64, dtype=dtype), torch.randn(1, 8, 300, 64, dtype=dtype)
    prompt, drafts = torch.randn(11, 8, 64, dtype=dtype), torch.randn(5, 8, 64, dtype=dtype)
    got = attend_blocks(torch.cat([prompt, drafts]), k, v, 1, group=11)
    one_call = F.scaled_dot_product_attention(prompt.transpose(0, 1)[None], k, v)[0].transpose(0, 1)
    assert torch.equal(got[:11], one_call)
    assert torch.equal(got[11:], attend_blocks(drafts, k, v, 1))
    assert torch.equal(attend_blocks(prompt, k, v, 1, group=11), one_call)


def test_packed_linear_matches_linear_keeps_the_tie_and_trains():
    torch.manual_seed(0)
    linear = nn.Linear(32, 48)
    packed = PackedLinear.from_linear(linear, 8)
    assert packed.weight is linear.weight
    x = torch.randn(8, 32)
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    y = packed(x.requires_grad_())  # autograd: the plain path on the same weight
    y.sum().backward()
    assert linear.weight.grad is not None


def test_pack_decoder_swaps_the_pass_linears_only():
    decoder, _ = _decoder(torch.float32)
    layer = decoder.layers[0]
    assert isinstance(decoder.proj, PackedLinear) and decoder.proj.weight is decoder.token_embedding.weight
    assert isinstance(layer.qkv, PackedLinear) and isinstance(layer.mlp.fc2, PackedLinear)
    assert type(layer.cross_kv) is nn.Linear  # runs once per window over every encoder frame


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 3, 8, 12])
def test_a_drafts_explicit_cross_attention_matches_the_fused_kernel(dtype, rows):
    """Plain passes (a draft's steps) attend the explicit way on CPUs without AMX in bf16 for a few
    rows: the same attention as torch's fused kernel, up to rounding."""
    from specscribe.models.invariant import cross_attend_explicit

    q, keys, values = _cross_inputs(dtype, rows)
    got, want = cross_attend_explicit(q, keys, values), attend(q, keys, values, None)
    assert got.shape == want.shape == (rows, 4, 16) and got.dtype == dtype
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("slow", [True, False])
def test_a_drafts_cross_attention_takes_the_explicit_way_only_where_the_fused_kernel_is_slow(monkeypatch, slow):
    from specscribe.models import invariant

    monkeypatch.setattr(invariant, "few_row_attention_is_slow", lambda: slow)  # AMX: False
    for dtype, rows, explicit in ((torch.bfloat16, 1, slow), (torch.bfloat16, 8, slow), (torch.bfloat16, 9, False),
                                  (torch.float32, 1, False)):
        q, keys, values = _cross_inputs(dtype, rows)
        want = (invariant.cross_attend_explicit if explicit else lambda *a: attend(*a, None))(q, keys, values)
        assert torch.equal(invariant.cross_attend_plain(q, keys, values), want), (dtype, rows)


def _cross_inputs(dtype: torch.dtype, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (T, H, Dh) and keys, values (1, H, S, Dh), seeded by rows."""
    g = torch.Generator().manual_seed(rows)
    q = torch.randn(rows, 4, 16, generator=g).to(dtype)
    keys, values = (torch.randn(1, 4, 300, 16, generator=g).to(dtype) for _ in range(2))
    return q, keys, values


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("frames", [DIMS.n_audio_ctx, 120])  # the packed length, and a shorter window
def test_a_packed_encoder_computes_the_plain_encoder(dtype, frames):
    """pack_encoder (prepacked linears, gelu fused into fc1) gives the plain encoder's output up to
    rounding, for the window it was packed for and a shorter one (streaming's --encoder-pad)."""
    import copy

    from specscribe.models.compute import PackedMLP, _can_pack, pack_encoder

    torch.manual_seed(1)
    model = WhisperModel(DIMS).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    plain = model.to(dtype).encoder
    packed = pack_encoder(copy.deepcopy(plain), DIMS.n_audio_ctx)
    if not _can_pack(plain.conv1.weight, DIMS.n_audio_ctx, "gelu"):  # bf16 without AVX512 (an AVX2-only CPU)
        assert type(packed.layers[0].mlp) is type(plain.layers[0].mlp) and type(packed.layers[0].qkv) is nn.Linear
        pytest.skip(f"oneDNN packs no {dtype} linears on this CPU: the encoder is left plain")
    assert isinstance(packed.layers[0].mlp, PackedMLP) and isinstance(packed.layers[0].qkv, PackedLinear)
    mel = torch.randn(1, DIMS.n_mels, 2 * frames).to(dtype)
    with torch.inference_mode():
        want, got = plain(mel).float(), packed(mel).float()
    assert got.shape == want.shape == (1, frames, DIMS.n_audio_state)
    tol = 5e-2 if dtype == torch.bfloat16 else 1e-4
    assert torch.allclose(got, want, atol=tol, rtol=tol)
    assert set(dict(packed.named_parameters())) == set(dict(plain.named_parameters()))  # same state dict names
    again = copy.deepcopy(packed)  # a copy is plain again, and still applies the gelu
    assert type(again.layers[0].mlp) is type(plain.layers[0].mlp) and type(again.layers[0].qkv) is nn.Linear
    with torch.inference_mode():
        assert torch.equal(again(mel).float(), want)


def test_pack_encoder_leaves_an_int8_encoder_as_it_is():
    from specscribe.models.compute import pack_encoder, prepare_model

    model = prepare_model(WhisperModel(DIMS).eval(), "int8", "cpu")
    before = [type(m) for m in model.encoder.modules()]
    pack_encoder(model.encoder, DIMS.n_audio_ctx)
    assert [type(m) for m in model.encoder.modules()] == before
