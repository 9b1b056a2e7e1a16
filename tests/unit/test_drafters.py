"""Drafters without weights: previous hypothesis, n-gram, chain, random, and the draft decoder on a
tiny randomly initialised Whisper decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specscribe.models.draft import DraftDecoder, DraftDecoderDrafter
from specscribe.models.drafters import ChainDrafter, Draft, NgramDrafter, PreviousHypothesisDrafter, RandomDrafter
from specscribe.models.errors import ModelError
from specscribe.models.speculative import SpecOptions, generate
from specscribe.models.weights import WhisperDims
from specscribe.models.whisper import WhisperModel


def test_previous_hypothesis_follows_then_resyncs():
    d = PreviousHypothesisDrafter([1, 2, 3, 4, 5, 6, 7, 8])
    d.begin([50])
    assert d.propose([], 3).tokens == (1, 2, 3)
    assert d.propose([1, 2, 3], 2).tokens == (4, 5)
    # a word changed: 9 instead of 4; taken as a substitution, the hypothesis goes on after 4
    assert d.propose([1, 2, 3, 9], 2).tokens == (5, 6)
    # two changed tokens in a row: nothing to go on
    assert d.propose([1, 2, 3, 9, 9], 2).tokens == ()
    # the output comes back to the hypothesis (5): continue after it
    assert d.propose([1, 2, 3, 9, 5], 3).tokens == (6, 7, 8)
    # an inserted token shifts the alignment; the offset is kept
    assert d.propose([1, 2, 3, 9, 5, 6, 7], 3).tokens == (8,)
    assert d.propose([1, 2, 3, 9, 5, 6, 7, 8], 3).tokens == ()


def test_previous_hypothesis_prefers_the_occurrence_nearest_its_position():
    hyp = [7, 1, 2, 7, 3, 4, 7, 5, 6]
    d = PreviousHypothesisDrafter(hyp, max_n=1)
    d.begin([])
    assert d.propose([7, 1, 2, 9, 3, 4, 7], 2).tokens == (5, 6)  # the third 7, not the first
    d.begin([])
    assert d.propose([7], 2).tokens == (1, 2)


def test_ngram_proposes_what_followed_the_latest_match():
    d = NgramDrafter(max_n=3, min_n=1)
    d.begin([10, 11, 12, 13, 14])
    assert d.propose([11, 12], 2).tokens == (13, 14)
    assert d.propose([99], 2).tokens == ()
    # the latest occurrence wins
    assert d.propose([5, 6, 7, 5, 6, 8, 5, 6], 1).tokens == (8,)
    # min_n: a single matching token is not enough for min_n=2, a matching pair is
    two = NgramDrafter(max_n=2, min_n=2)
    two.begin([10, 11, 12, 13])
    assert two.propose([99, 11], 2).tokens == ()
    assert two.propose([10, 11], 2).tokens == (12, 13)
    one = NgramDrafter(max_n=2, min_n=1)
    one.begin([10, 11, 12, 13])
    assert one.propose([99, 11], 2).tokens == (12, 13)
    with pytest.raises(ValueError):
        NgramDrafter(max_n=1, min_n=2)


def test_chain_takes_first_non_empty_and_forwards_every_call():
    class Spy:
        name = "spy"
        cheap = True

        def __init__(self, tokens):
            self.tokens, self.calls = tokens, []

        def begin(self, prompt, temperature=0.0, generator=None):
            self.calls.append("begin")

        def propose(self, generated, k):
            self.calls.append("propose")
            return Draft(self.tokens[:k])

        def accept(self, generated, features=None):
            self.calls.append("accept")

        def finish(self):
            self.calls.append("finish")

    a, b = Spy(()), Spy((4, 5, 6))
    chain = ChainDrafter([a, b])
    chain.begin([1])
    assert chain.propose([], 2).tokens == (4, 5)
    chain.accept([4])
    chain.finish()
    assert a.calls == b.calls == ["begin", "propose", "accept", "finish"]
    assert chain.name == "spy+spy"


def test_random_drafter_is_seeded_and_in_vocab():
    d = RandomDrafter([3, 5, 7], seed=1)
    d.begin([])
    first = d.propose([], 20).tokens
    d.begin([])
    assert d.propose([], 20).tokens == first and set(first) <= {3, 5, 7}


# --- the draft decoder on a tiny random Whisper ---------------------------------------------

DIMS = WhisperDims(n_mels=8, n_audio_ctx=6, n_audio_state=16, n_audio_head=2, n_audio_layer=1,
                   n_vocab=40, n_text_ctx=24, n_text_state=16, n_text_head=2, n_text_layer=3)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = WhisperModel(DIMS).eval()
    with torch.no_grad():
        model.decoder.positional_embedding.normal_()
    enc = torch.randn(1, DIMS.n_audio_ctx, DIMS.n_audio_state)
    return model, enc


def test_draft_shares_embeddings_and_copies_layers(tiny):
    model, _ = tiny
    draft = DraftDecoder.from_target(model.decoder)
    dec = draft.decoder
    assert draft.sources == (0, 2)
    assert dec.token_embedding is model.decoder.token_embedding and dec.proj is model.decoder.proj
    assert dec.positional_embedding.data_ptr() == model.decoder.positional_embedding.data_ptr()
    assert dec.layers[0] is not model.decoder.layers[0]
    assert torch.equal(dec.layers[1].qkv.weight, model.decoder.layers[2].qkv.weight)


def _greedy(session, prompt, n):
    out, logits = [], session.forward(prompt)[-1]
    for _ in range(n):
        out.append(int(logits.argmax()))
        logits = session.forward([out[-1]])[-1]
    return out


def test_draft_drafter_proposes_its_greedy_continuation_and_follows_crops(tiny):
    model, enc = tiny
    draft = DraftDecoder.from_target(model.decoder, sources=(1,))
    prompt = [1, 2, 3]
    want = _greedy(draft.session(enc), prompt, 6)
    drafter = DraftDecoderDrafter(draft, enc)
    drafter.begin(prompt)
    assert drafter.propose([], 3).tokens == tuple(want[:3])
    drafter.accept(want[:1] + [39])  # the verifier kept one draft and a correction
    assert drafter.session.length == len(prompt) + 1  # cropped to the common prefix
    assert drafter.propose(want[:4], 2).tokens == tuple(want[4:6])
    drafter.finish()
    assert drafter.session is None


def test_target_with_draft_decoder_is_lossless(tiny):
    model, enc = tiny
    draft = DraftDecoder.from_target(model.decoder)

    class Rules:
        def apply(self, logits, generated):
            return logits

    opts = SpecOptions(eot=39, max_new_tokens=18, n_ctx=DIMS.n_text_ctx)
    plain = generate(model.decoder.session(enc), Rules(), [1, 2], None, opts)
    spec = generate(model.decoder.session(enc), Rules(), [1, 2], DraftDecoderDrafter(draft, enc, eot=39), opts)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0
    assert spec.logprobs == pytest.approx(plain.logprobs, abs=1e-4)


def test_checkpoint_round_trip_and_refusal(tiny, tmp_path):
    model, enc = tiny
    draft = DraftDecoder.from_target(model.decoder, sources=(0, -1))
    with torch.no_grad():
        draft.decoder.layers[0].mlp.fc1.weight.add_(0.5)  # as if trained
    path = tmp_path / "draft.safetensors"
    draft.save(path, target_sha256="a" * 64)
    loaded = DraftDecoder.load(path, model.decoder, "a" * 64)
    assert loaded.sources == (0, 2)
    assert loaded.decoder.token_embedding is model.decoder.token_embedding
    a = draft.session(enc).forward([1, 2, 3])
    b = loaded.session(enc).forward([1, 2, 3])
    assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ModelError, match="another target"):
        DraftDecoder.load(path, model.decoder, "b" * 64)
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="unreadable"):
        DraftDecoder.load(tmp_path / "junk.safetensors", model.decoder, "a" * 64)
    with pytest.raises(ModelError, match="does not exist"):
        DraftDecoder.load(tmp_path / "missing.safetensors", model.decoder, "a" * 64)


def test_reduced_head_keeps_its_rows_and_round_trips(tiny, tmp_path):
    model, enc = tiny
    vocab = torch.tensor([3, 5, 7, 11, 39])  # a reduced head: 5 of the 40 tokens
    full = DraftDecoder.from_target(model.decoder, sources=(0, -1))
    small = DraftDecoder(model.decoder, list(full.decoder.layers), full.sources, vocab)
    want = full.session(enc).forward([1, 2, 3])  # (3, 40)
    got = small.full_logits(small.session(enc).forward([1, 2, 3])[-1])  # (40,)
    assert torch.allclose(got[vocab], want[-1, vocab], atol=1e-5)
    assert torch.isinf(got).sum() == 40 - len(vocab)
    drafter = DraftDecoderDrafter(small, enc, eot=39)
    drafter.begin([1, 2, 3])
    proposed = drafter.propose([], 4).tokens
    assert proposed and set(proposed) <= set(vocab.tolist())
    path = tmp_path / "reduced.safetensors"
    small.save(path, target_sha256="a" * 64)
    loaded = DraftDecoder.load(path, model.decoder, "a" * 64)
    assert torch.equal(loaded.vocab_ids, vocab)
    assert torch.allclose(loaded.session(enc).forward([1, 2, 3]), small.session(enc).forward([1, 2, 3]), atol=1e-5)
    loaded.quantize_int8()  # int8 layers and head still propose from the reduced vocabulary
    drafter = DraftDecoderDrafter(loaded, enc, eot=39)
    drafter.begin([1, 2, 3])
    assert set(drafter.propose([], 4).tokens) <= set(vocab.tolist())
    # an unreadable vocabulary is refused, not silently used
    from safetensors.torch import load_file, save_file
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata()
    tensors = load_file(str(path))
    tensors["vocab_ids"] = torch.tensor([3, 400], dtype=torch.int32)
    save_file(tensors, str(tmp_path / "bad.safetensors"), metadata=meta)
    with pytest.raises(ModelError, match="reduced vocabulary"):
        DraftDecoder.load(tmp_path / "bad.safetensors", model.decoder, "a" * 64)


def test_build_drafter_choices(tiny):
    from specscribe.models.draft_policy import build_drafter

    model, enc = tiny
    draft = DraftDecoder.from_target(model.decoder)
    rules = None
    assert build_drafter("none", (1, 2), draft, enc, rules, 39) is None
    assert build_drafter("auto", (), None, enc, rules, 39) is None  # nothing that would pay: plain
    assert isinstance(build_drafter("auto", (), draft, enc, rules, 39), DraftDecoderDrafter)
    assert build_drafter("auto", (1, 2), None, enc, rules, 39).name == "hypothesis+ngram"
    assert build_drafter("auto", (1, 2), draft, enc, rules, 39).name == "hypothesis+ngram"  # re-decodes
    assert build_drafter("decoder", (1, 2), draft, enc, rules, 39).name == "hypothesis+decoder"
    assert isinstance(build_drafter("ngram", (), draft, enc, rules, 39), NgramDrafter)
    with pytest.raises(ValueError, match="unknown drafter"):
        build_drafter("fast", (), draft, enc, rules, 39)
    # auto skips a draft decoder whose validation acceptance is low for the language and task
    draft.group_acceptance = {"en-transcribe": 0.66, "xx-transcribe": 0.38, "xx-translate": 0.41}
    assert isinstance(build_drafter("auto", (), draft, enc, rules, 39, language="en"), DraftDecoderDrafter)
    assert build_drafter("auto", (), draft, enc, rules, 39, language="de") is None
    assert build_drafter("auto", (1, 2), draft, enc, rules, 39, language="de").name == "hypothesis+ngram"
    assert isinstance(build_drafter("auto", (), draft, enc, rules, 39, language="en", task="translate"), DraftDecoderDrafter)
    assert build_drafter("auto", (), draft, enc, rules, 39, language="de", task="translate") is None
    assert isinstance(build_drafter("decoder", (), draft, enc, rules, 39, language="de"), DraftDecoderDrafter)  # asked for


def test_a_shipped_draft_is_only_used_for_its_own_target(tiny, tmp_path, monkeypatch):
    """The shipped checkpoint is found by the model's folder name ("base"): a user's own folder called base that
    holds another model gets untrained copies (--draft decoder) or no draft (auto), not a refusal to start. A
    --draft-model the user names for another target is still refused."""
    from specscribe.models import draft_loading

    model, _ = tiny
    shipped = tmp_path / "base-draft.safetensors"
    DraftDecoder.from_target(model.decoder).save(shipped, target_sha256="a" * 64)
    monkeypatch.setattr(draft_loading, "shipped_checkpoint", lambda name: shipped if Path(name).name == "base" else None)
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"another model")  # its sha256 is not "a" * 64
    decoder = draft_loading.load_draft_decoder(model.decoder, folder, str(folder), None, "float32", untrained_ok=True)
    assert isinstance(decoder, DraftDecoder) and decoder.sources == (0, len(model.decoder.layers) - 1)
    assert draft_loading.load_draft_decoder(model.decoder, folder, str(folder), None, "float32", untrained_ok=False,
                                            mismatch_ok=True) is None
    with pytest.raises(ModelError, match="another target"):
        draft_loading.load_draft_decoder(model.decoder, folder, str(folder), str(shipped), "float32", untrained_ok=True)
