"""The distillation training stage on a tiny random 'target' decoder (no weights, a few steps)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from specscribe.models.distill import labels, metrics, train
from specscribe.models.distill.examples import EncoderCache, Example, collate, load_examples
from specscribe.models.distill.export import draft_state, export_draft, load_draft_into
from specscribe.models.distill.net import DraftNet
from specscribe.models.whisper import DecoderLayer, TextDecoder

V, D, H, S, EOT = 64, 32, 4, 12, 60  # vocab, width, heads, audio positions, end-of-text
INFO = {"eot": EOT, "n_vocab": V, "sha256": "ab" * 32, "model": "tiny"}  # load_target_decoder's info


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread avoids OpenMP spin-waits on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_target(seed: int = 0, n_layers: int = 3) -> TextDecoder:
    torch.manual_seed(seed)
    emb = nn.Embedding(V, D)
    proj = nn.Linear(D, V, bias=False)
    proj.weight = emb.weight
    layers = [DecoderLayer(D, H, 4 * D) for _ in range(n_layers)]
    dec = TextDecoder(emb, torch.randn(40, D) * 0.1, layers, nn.LayerNorm(D), proj).eval()
    for p in dec.parameters():
        p.requires_grad_(False)
    return dec


def greedy(dec: TextDecoder, enc: torch.Tensor, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """The tiny target's own greedy text tokens (specials forbidden until eot at step n) and its
    (rule-filtered) logits at each step."""
    session = dec.session(enc)
    logits = session.forward(prompt)[-1]
    tokens, rows = [], []
    for i in range(n + 1):
        row = logits.clone()
        if i < n:
            row[EOT:] = -50.0  # text tokens only, then end-of-text
        else:
            row[EOT] = row.abs().max() + 50.0
        rows.append(row)
        token = int(row.argmax())
        if token == EOT:
            break
        tokens.append(token)
        logits = session.forward([token])[-1]
    return tokens, torch.stack(rows)


def write_labels(folder, dec: TextDecoder, n_items: int = 6, top_k: int = 8) -> None:
    """A labels/ folder in the label stage's layout, labelled by the tiny target itself."""
    (folder / "labels" / "enc").mkdir(parents=True)
    (folder / "labels" / "topk").mkdir()
    g = torch.Generator().manual_seed(1)
    with open(folder / "labels" / "labels.jsonl", "w") as fh:
        for i in range(n_items):
            enc = torch.randn(1, S, D, generator=g)
            np.save(folder / "labels" / "enc" / f"it{i}.npy", enc[0].numpy().astype(np.float16))
            prompt = [61, 62 + i % 2]
            tokens, logits = greedy(dec, enc.half().float(), prompt, 6 + i % 3)
            values, indices = logits.topk(top_k, dim=-1)
            seq = f"it{i}-0"
            np.savez(folder / "labels" / "topk" / f"{seq}.npz", values=values.numpy().astype(np.float16),
                     indices=indices.numpy().astype(np.int32))  # fmt: skip
            row = {"seq": seq, "item": f"it{i}", "split": "val" if i >= n_items - 2 else "train", "lang": "en",
                   "task": "transcribe", "timestamps": False, "prompt": prompt, "tokens": tokens, "kept": True}  # fmt: skip
            fh.write(json.dumps(row) + "\n")


def test_passes_for_counts_the_speculative_rounds():
    assert metrics.passes_for([True] * 8, 4) == 2  # 4 accepted + bonus, 3 accepted + end
    assert metrics.passes_for([False] * 5, 4) == 5  # every pass emits only the target's token
    assert metrics.passes_for([True, True, False, True], 8) == 2
    report = metrics.acceptance_report([("a", [True, False]), ("b", [True, True, True, True])], ks=(4,))
    assert report["acceptance"] == round(5 / 6, 4)
    assert report["groups"]["b"]["tokens_per_pass"]["4"] == 4.0


def test_draft_net_matches_the_cached_inference_decoder():
    dec = tiny_target()
    net = DraftNet(dec, (0, -1))
    assert net.source_layers == (0, 2)
    enc = torch.randn(1, S, D)
    tokens = [61, 62, 5, 9, 17]
    with torch.no_grad():
        batched = net(torch.tensor([tokens]), enc)[0]  # (T, V)
    session = net.text_decoder(dec).session(enc)
    cached = torch.cat([session.forward(tokens[:2]), session.forward(tokens[2:3]), session.forward(tokens[3:])])
    torch.testing.assert_close(batched, cached, atol=1e-4, rtol=1e-4)


def test_training_raises_agreement_with_the_target(tmp_path):
    dec = tiny_target()
    write_labels(tmp_path, dec)
    seqs = labels.read_labels(tmp_path)
    examples = load_examples(tmp_path, seqs, EOT)
    encoders = EncoderCache(tmp_path)
    net = DraftNet(dec, (0,))  # one layer of three, perturbed: starts far from the target
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in net.layers[0].named_parameters():
            if "cross_kv" not in name:
                p.add_(torch.randn_like(p) * 0.5)
    before = train.evaluate(net, examples, encoders)
    rows = []
    options = train.TrainOptions(steps=60, lr=3e-3, warmup=5, batch_size=4, eval_every=30, dtype="float32")
    after = train.train(net, examples, examples, encoders, options, log=rows.append)
    assert after["acceptance"] >= before["acceptance"] + 0.2, (before, after)
    assert [r["step"] for r in rows] == [0, 30, 60] and rows[-1]["loss"] < rows[1]["loss"] + 1.0
    assert set(after["tokens_per_pass"]) == {"4", "5", "6", "7", "8"}
    frozen = dict(net.layers[0].named_parameters())["cross_kv.weight"]
    assert torch.equal(frozen, dec.layers[0].cross_kv.weight.float())  # shared with the target


def test_distill_loss_is_zero_kl_for_the_teacher_itself():
    dec = tiny_target()
    net = DraftNet(dec, (0, 1, 2))  # all layers: the draft *is* the target
    enc = torch.randn(1, S, D)
    tokens = [5, 9, 17, 3]
    logits = dec.session(enc).forward([61, 62] + tokens)[1:]  # (5, V) teacher forced
    values, indices = logits.topk(V, dim=-1)
    ex = Example("x", torch.tensor([61, 62] + tokens), 1, torch.tensor(tokens + [EOT]), values, indices, "en")
    batch = collate([ex], _Const(enc[0]), None)
    with torch.no_grad():
        _, parts = train.distill_loss(net(batch.tokens, batch.enc), batch, 0.5)
    assert parts["kl"] < 1e-3


class _Const:
    def __init__(self, enc):
        self.enc = enc

    def get(self, item):
        return self.enc


def test_reduced_vocabulary_keeps_specials_and_maps_targets(tmp_path):
    seqs = [labels.LabelledSequence("s", "i", "train", "en", "transcribe", False, (61,), (3, 3, 3, 7, 7, 9))]
    ids = train.reduced_vocabulary(seqs, size=V - EOT + 2, first_special=EOT, n_vocab=V)
    assert ids.tolist() == [3, 7] + list(range(EOT, V))
    index = train.head_index_of(ids, V)
    assert index[7] == 1 and index[9] == -1 and index[EOT] == 2
    dec = tiny_target()
    net = DraftNet(dec, (0,), vocab_ids=ids)
    logits = net(torch.tensor([[61, 3, 7]]), torch.randn(1, S, D))
    assert logits.shape == (1, 3, len(ids))


def test_export_loads_as_a_draft_decoder_and_checks_the_target(tmp_path):
    from specscribe.models.draft import DraftDecoder
    from specscribe.models.errors import ModelError
    from specscribe.models.registry import sha256_file

    dec = tiny_target()
    net = DraftNet(dec, (0, 2))
    with torch.no_grad():
        net.layers[1].mlp.fc1.weight.add_(0.5)
    path = export_draft(net, tmp_path / "d.safetensors", dec, "ab" * 32, {"x": 1})
    assert (tmp_path / "d.safetensors.sha256").read_text().split()[0] == sha256_file(path)
    assert all(t.dtype == torch.float16 for t in draft_state(net).values())
    draft = DraftDecoder.load(path, dec, "ab" * 32)
    assert draft.sources == (0, 2)
    torch.testing.assert_close(draft.decoder.layers[1].mlp.fc1.weight, net.layers[1].mlp.fc1.weight, atol=2e-3, rtol=1e-3)
    with pytest.raises(ModelError, match="another target"):
        DraftDecoder.load(path, dec, "cd" * 32)
    from specscribe.models.distill.export import checkpoint_sources

    assert checkpoint_sources(path) == (0, 2)
    fresh = DraftNet(dec, (0, 2))
    meta = load_draft_into(fresh, path)
    assert meta["shared_cross_kv"] == "true" and json.loads(meta["training"]) == {"x": 1}
    torch.testing.assert_close(fresh.layers[1].mlp.fc1.weight, net.layers[1].mlp.fc1.weight, atol=2e-3, rtol=1e-3)


def test_reduced_vocabulary_checkpoint_keeps_its_ids(tmp_path):
    dec = tiny_target()
    net = DraftNet(dec, (0,), vocab_ids=torch.tensor([1, 2, 60, 61]))
    path = export_draft(net, tmp_path / "r.safetensors", dec, "ab" * 32, {})
    fresh = DraftNet(dec, (0,))
    load_draft_into(fresh, path)
    assert fresh.vocab_ids.tolist() == [1, 2, 60, 61]
    # inference reads the same reduced head: the cached decoder's logits equal the trained net's
    from specscribe.models.draft import DraftDecoder

    draft = DraftDecoder.load(path, dec, "ab" * 32)
    assert draft.vocab_ids.tolist() == [1, 2, 60, 61]
    enc = torch.randn(1, S, D)
    want = net(torch.tensor([[61, 62, 5]]), enc)[0, -1]  # (4,)
    got = draft.session(enc).forward([61, 62, 5])[-1]  # (4,)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)  # fp16 checkpoint


def test_training_reads_several_dataset_folders(tmp_path):
    dec = tiny_target()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write_labels(a, dec, n_items=4)
    write_labels(b, dec, n_items=4)
    np.save(b / "labels" / "enc" / "only-b.npy", np.zeros((S, D), np.float16))
    encoders = EncoderCache([a, b])
    assert encoders.get("only-b").shape == (S, D)
    with pytest.raises(FileNotFoundError, match="no encoder output"):
        encoders.get("nowhere")
    options = train.TrainOptions(steps=2, warmup=1, batch_size=2, eval_every=2, dtype="float32", layers=(0,))
    result = train.train_from_folder([a, b], "unused", tmp_path / "d.safetensors", options, target=(dec, INFO))
    assert result["train_sequences"] == 8 and (tmp_path / "d.safetensors").is_file()


def test_bad_layer_index_is_a_clear_error():
    with pytest.raises(ValueError, match="out of range"):
        DraftNet(tiny_target(), (7,))


def test_eval_reports_reduced_heads_and_step_costs(tmp_path):
    from specscribe.models.distill import evaluate

    dec = tiny_target()
    write_labels(tmp_path, dec, n_items=4)
    seqs = labels.read_labels(tmp_path)
    examples = load_examples(tmp_path, seqs, EOT)
    encoders = EncoderCache(tmp_path)
    net = DraftNet(dec, (0, 1, 2))  # the whole target: agrees everywhere but at forced positions
    reports, ids = evaluate.vocabulary_sweep(net, seqs, examples, encoders, [V - EOT], EOT, V)
    assert reports["full"]["acceptance"] > 0.5  # raw argmax vs rule-filtered labels
    assert reports[str(V - EOT)]["acceptance"] < 0.3  # specials only: right at end-of-text alone
    assert net.vocab_ids is None  # restored
    enc = encoders.get(examples[0].item).float().unsqueeze(0)
    costs = evaluate.step_costs(dec, net, enc, [61, 62, 5], ids, ("float32",), rounds=1)
    assert set(costs["float32"]) == {"target", "draft", f"draft_vocab_{V - EOT}"}
    assert all(0 < c["min"] <= c["median"] for c in costs["float32"].values())


def test_all_stage_parser_carries_every_stage_option():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "distill_draft.py"
    spec = importlib.util.spec_from_file_location("distill_draft", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.build_parser().parse_args(["all", "--out", "x", "--hours", "0.1", "--steps", "5", "--shard", "1/2"])
    for name in ("hours", "languages", "backends", "model", "top_k", "shard", "draft_out", "steps", "warmup",
                 "layers", "follow", "init", "threads", "seed"):  # fmt: skip
        assert hasattr(args, name), name
    assert args.func is module.cmd_all and args.shard == "1/2"
