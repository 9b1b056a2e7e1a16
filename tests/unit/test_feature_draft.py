"""The feature-level drafter on a tiny random target: training/inference parity, losslessness,
the target's states reaching the drafter, checkpoints, and training on feature labels."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specscribe.models.distill import labels, train
from specscribe.models.distill.examples import CrossCache, EncoderCache
from specscribe.models.distill.export import export_draft, load_draft_into
from specscribe.models.distill.net import DraftNet
from specscribe.models.distill.feature_net import (
    FeatureDraftNet,
    collate_features,
    evaluate_features,
    load_feature_examples,
)
from specscribe.models.draft import DraftDecoder
from specscribe.models.draft_policy import build_drafter
from specscribe.models.errors import ModelError
from specscribe.models.feature_draft import FeatureDrafter
from specscribe.models.speculative import SpecOptions, generate
from test_distill_train import D, EOT, INFO, S, one_thread, tiny_target, write_labels  # noqa: F401 (autouse fixture)

SHA = "ab" * 32


class NoRules:
    def apply(self, logits, generated):
        return logits


def feature_draft(dec, seed: int = 0) -> tuple[FeatureDraftNet, DraftDecoder]:
    net = FeatureDraftNet(dec, (0, -1))
    with torch.no_grad():  # a state-reading fusion, so that the drafts depend on the target's states
        net.fuse.linear.weight[:, :D].normal_(0, 0.3, generator=torch.Generator().manual_seed(seed))
    inference = net.text_decoder(dec)
    draft = DraftDecoder(dec, list(inference.layers), net.source_layers, fuse=inference.fuse)
    draft.shared_cross_kv = True
    return net, draft


def add_features(folder, dec) -> None:
    """labels/feat/SEQ.npy for write_labels' sequences: the target's teacher-forced final-LN states."""
    (folder / "labels" / "feat").mkdir()
    for s in labels.read_labels(folder):
        enc = torch.from_numpy(np.load(folder / "labels" / "enc" / f"{s.item}.npy")).float().unsqueeze(0)
        session = dec.session(enc)
        session.forward(list(s.prompt) + list(s.tokens))
        np.save(folder / "labels" / "feat" / f"{s.seq}.npy", session.hidden[len(s.prompt) - 1 :].numpy().astype(np.float16))


def test_run_pass_keeps_the_final_ln_states_of_the_head_rows():
    dec = tiny_target()
    enc = torch.randn(1, S, D)
    session = dec.session(enc)
    logits = session.forward([61, 62, 5, 9], logits_from=2)  # (2, V)
    assert session.hidden.shape == (2, D)
    torch.testing.assert_close(dec.proj(session.hidden), logits)


def test_trained_net_matches_the_cached_inference_draft():
    dec = tiny_target()
    net, draft = feature_draft(dec)
    enc = torch.randn(1, S, D)
    prompt, tokens = [61, 62], [5, 9, 17, 3]
    target = dec.session(enc)
    target.forward(prompt + tokens)
    states = torch.cat([torch.zeros(len(prompt), D), target.hidden[len(prompt) - 1 : -1]])  # (6, D): H_{q-1}, zeros in the prompt
    seq = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = net.logits(net.step(seq, states.unsqueeze(0), net.cross_keys_values(enc)))[0]  # (6, V)
    session = draft.session(enc)
    cached = torch.cat([session.forward(prompt + tokens[:1], features=states[:3]), session.forward(tokens[1:], features=states[3:])])
    torch.testing.assert_close(logits, cached, atol=1e-4, rtol=1e-4)


def test_an_untrained_feature_draft_drafts_as_the_draft_decoder():
    from specscribe.models.draft import DraftDecoderDrafter
    from specscribe.models.feature_draft import feature_draft_from

    dec = tiny_target()
    plain = DraftDecoder.from_target(dec)
    feature = feature_draft_from(plain)  # fuse [0 | I]: the state is not read yet
    enc = torch.randn(1, S, D)
    a, b = DraftDecoderDrafter(plain, enc, eot=EOT), FeatureDrafter(feature, enc, eot=EOT)
    a.begin([61, 62]), b.begin([61, 62])
    assert b.propose([], 3).tokens == a.propose([], 3).tokens  # the prompt pass: zeros for the prompt
    b.accept([5], torch.randn(1, D))
    a.accept([5])
    assert b.propose([5], 4).tokens == a.propose([5], 4).tokens


def test_feature_drafter_is_lossless_and_reads_the_targets_states():
    dec = tiny_target()
    _, draft = feature_draft(dec)
    enc = torch.randn(1, S, D)
    prompt = [61, 62]
    opts = SpecOptions(eot=EOT, max_new_tokens=20, n_ctx=40, adaptive=False, k_init=3)
    plain = generate(dec.session(enc), NoRules(), prompt, None, opts)
    drafter = FeatureDrafter(draft, enc, eot=EOT)
    states_seen = []
    accept = drafter.accept
    drafter.accept = lambda generated, features=None: (states_seen.append(features.clone()), accept(generated, features))
    spec = generate(dec.session(enc), NoRules(), prompt, drafter, opts)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0
    assert spec.logprobs == pytest.approx(plain.logprobs, abs=1e-4)
    # what reached the drafter are the target's own states that chose each generated token
    teacher = dec.session(enc)
    teacher.forward(prompt + list(plain.tokens))
    want = teacher.hidden[len(prompt) - 1 : len(prompt) - 1 + len(plain.tokens)]
    torch.testing.assert_close(torch.cat(states_seen), want, atol=1e-4, rtol=1e-4)


def test_feature_drafter_drafts_nothing_without_the_targets_states():
    dec = tiny_target()
    _, draft = feature_draft(dec)
    drafter = FeatureDrafter(draft, torch.randn(1, S, D), eot=EOT)
    drafter.begin([61, 62])
    assert drafter.propose([], 4).tokens  # the prompt's rows read zeros
    drafter.accept([5])  # a caller without the target's states
    assert drafter.propose([5], 4).tokens == ()
    with pytest.raises(ValueError, match="feature-level"):
        FeatureDrafter(DraftDecoder.from_target(dec), torch.randn(1, S, D))


def test_checkpoint_round_trip_and_build_drafter(tmp_path):
    dec = tiny_target()
    net, _ = feature_draft(dec)
    path = export_draft(net, tmp_path / "f.safetensors", dec, SHA, {"x": 1})
    draft = DraftDecoder.load(path, dec, SHA)
    assert draft.is_feature and draft.sources == (0, 2) and draft.shared_cross_kv
    torch.testing.assert_close(draft.decoder.fuse.linear.weight, net.fuse.linear.weight, atol=2e-3, rtol=1e-3)
    assert float(draft.decoder.fuse.scale) == pytest.approx(float(net.fuse.scale), rel=1e-3)
    with pytest.raises(ModelError, match="another target"):
        DraftDecoder.load(path, dec, "cd" * 32)
    fresh = FeatureDraftNet(dec, (0, -1))
    load_draft_into(fresh, path)
    torch.testing.assert_close(fresh.fuse.linear.weight, net.fuse.linear.weight, atol=2e-3, rtol=1e-3)
    enc = torch.randn(1, S, D)
    drafter = build_drafter("decoder", [], draft, enc, NoRules(), EOT)
    assert isinstance(drafter, FeatureDrafter)
    assert not DraftDecoder.load(export_draft(DraftNet(dec, (0,)), tmp_path / "d.safetensors", dec, SHA, {}), dec, SHA).is_feature


def test_feature_training_raises_agreement(tmp_path):
    dec = tiny_target()
    write_labels(tmp_path, dec)
    add_features(tmp_path, dec)
    seqs = labels.read_labels(tmp_path)
    examples = load_feature_examples(tmp_path, seqs, EOT)
    encoders = EncoderCache(tmp_path)
    fb = collate_features(examples[:2], encoders, None)
    e = examples[0]
    n, start = len(e.base.targets) - 1, e.base.start
    assert not fb.states[0, : start + 1].any() and torch.equal(fb.states[0, start + 1 : start + 1 + n], e.states[:n].float())
    assert torch.equal(fb.target_states[0, start : start + n + 1], e.states.float())
    assert fb.own[0].sum() == n - 1 and fb.own[0, start + 2]
    net = FeatureDraftNet(dec, (0,))
    torch.manual_seed(3)
    with torch.no_grad():  # perturbed: starts far from the target
        for name, p in net.layers[0].named_parameters():
            if "cross_kv" not in name:
                p.add_(torch.randn_like(p) * 0.5)
    crosses = CrossCache(net, encoders)
    before = evaluate_features(net, examples, encoders, crosses)
    options = train.TrainOptions(steps=60, lr=3e-3, warmup=5, batch_size=4, eval_every=30, dtype="float32", feature=True)
    rows = []
    after = train.train(net, examples, examples, encoders, options, log=rows.append)
    assert after["acceptance"] >= before["acceptance"] + 0.2, (before, after)
    assert len(after["steps"]) == 2 and [r["step"] for r in rows] == [0, 30, 60]
    assert after["positions"] == train.evaluate(DraftNet(dec, (0,)), [x.base for x in examples], encoders)["positions"]


def test_feature_training_from_folder_needs_feature_labels(tmp_path):
    dec = tiny_target()
    write_labels(tmp_path, dec, n_items=4)
    options = train.TrainOptions(steps=2, warmup=1, batch_size=2, eval_every=2, dtype="float32", layers=(2,), feature=True)
    with pytest.raises(FileNotFoundError, match="label the dataset again"):
        train.train_from_folder(tmp_path, "unused", tmp_path / "f.safetensors", options, target=(dec, INFO))
    add_features(tmp_path, dec)
    result = train.train_from_folder(tmp_path, "unused", tmp_path / "f.safetensors", options, target=(dec, INFO))
    assert DraftDecoder.load(result["checkpoint"], dec, INFO["sha256"]).is_feature
    assert json.loads(DraftDecoder.load(result["checkpoint"], dec, INFO["sha256"]).metadata(SHA)["layer_sources"]) == [2]
