"""The distillation data stage (texts, synthesis, manifest) and the label stage, with fakes."""

from __future__ import annotations

import json
import random
import shutil
import zlib

import numpy as np
import pytest

from specscribe.models.distill import data, labels, text
from specscribe.models.distill.synth import SAMPLE_RATE, Espeak, Speech, augment


class ToneSynth:
    """Fake backend: a tone whose length follows the text (about 14 characters a second)."""

    name = "tone"
    languages = ("en", "de", "fr")

    def synthesize(self, txt: str, lang: str, rng: random.Random) -> Speech:
        n = int(len(txt) / 14 * SAMPLE_RATE)
        t = np.arange(n) / SAMPLE_RATE
        return Speech((0.3 * np.sin(2 * np.pi * rng.uniform(150, 300) * t)).astype(np.float32), f"tone:{lang}")


def _corpus(n: int = 40) -> dict[str, list[text.TextItem]]:
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    rng = random.Random(1)
    out = {}
    for lang in ("en", "de", "fr"):
        out[lang] = [
            text.TextItem(" ".join(rng.choices(words, k=rng.randint(4, 30))) + ".", lang, f"fortunes:{lang}/x{i}")
            for i in range(n)
        ]
    return out


def test_clean_keeps_prose_and_drops_junk():
    assert text.clean("  Never put off   till tomorrow\n what you can avoid.  -- Anon") == (
        "Never put off till tomorrow what you can avoid."
    )
    assert text.clean("|  ___  |\n| |   | |  ascii art here") is None
    assert text.clean("%s: could not open '%s'") is None  # placeholders leave no prose
    assert text.clean("short") is None


def test_fortune_files_are_split_and_language_folders_respected(tmp_path):
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "sprueche").write_text("Ein Sprichwort ist ein kurzer Satz.\n%\nNoch ein langer Satz hier.\n")
    (tmp_path / "english").write_text("A penny saved is a penny earned.\n%\nLook before you leap, they said.\n")
    (tmp_path / "english.dat").write_bytes(b"\x00\x01")
    de = list(text.fortunes("de", tmp_path))
    en = list(text.fortunes("en", tmp_path))
    assert [t.text for t in de] == ["Ein Sprichwort ist ein kurzer Satz.", "Noch ein langer Satz hier."]
    assert {t.lang for t in de} == {"de"} and len(en) == 2 and all(t.source.startswith("fortunes:en/") for t in en)


def test_evaluation_transcripts_are_excluded():
    from specscribe.clips import JFK_TEXT

    items = [
        text.TextItem("He said: ask not what your country can do for you, my friends.", "en", "a"),
        text.TextItem("A completely unrelated sentence about the weather today.", "en", "b"),
    ]
    kept = text.exclude_overlap(items, [JFK_TEXT])
    assert [i.source for i in kept] == ["b"]


def test_build_dataset_is_reproducible_and_bounded(tmp_path):
    options = data.DataOptions(hours=0.03, seed=3, languages={"en": 0.6, "de": 0.2, "fr": 0.2}, backends={"espeak": 1})
    backends = {"espeak": ToneSynth()}
    first = data.build_dataset(tmp_path / "a", _corpus(), backends, options, log=lambda _: None)
    second = data.build_dataset(tmp_path / "b", _corpus(), backends, options, log=lambda _: None)
    assert [i.id for i in first] == [i.id for i in second]
    assert sum(i.duration for i in first) >= 0.03 * 3600
    assert all(options.min_seconds <= i.duration <= options.max_seconds for i in first)
    assert any(i.duration >= 18 for i in first), "some windows must be long (timestamps up to 30 s)"
    assert {i.lang for i in first} >= {"en"} and len({i.lang for i in first}) > 1
    rows = data.read_manifest(tmp_path / "a")
    assert rows == first
    audio = data.read_wav(tmp_path / "a" / rows[0].audio)
    assert abs(len(audio) / SAMPLE_RATE - rows[0].duration) < 1e-3
    recipe = json.loads((tmp_path / "a" / "recipe.json").read_text())
    assert recipe["windows"] == len(first)
    with pytest.raises(FileExistsError):
        data.build_dataset(tmp_path / "a", _corpus(), backends, options, log=lambda _: None)


def test_augment_pads_and_limits_level():
    rng = random.Random(0)
    audio = np.concatenate([np.zeros(8000), 0.9 * np.ones(16000), np.zeros(8000)]).astype(np.float32)
    out = augment(audio, rng)
    assert out.dtype == np.float32 and np.abs(out).max() <= 1.0
    assert 16000 + 0.2 * SAMPLE_RATE <= len(out) <= 16000 + 1.2 * SAMPLE_RATE


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_speaks_several_languages():
    synth = Espeak()
    rng = random.Random(0)
    for lang, sentence in (("en", "Hello there, how are you today?"), ("de", "Guten Morgen, wie geht es dir?")):
        speech = synth.synthesize(sentence, lang, rng)
        assert 0.8 < len(speech.audio) / SAMPLE_RATE < 8 and float(np.abs(speech.audio).max()) > 0.05
        assert speech.voice.startswith("espeak:")


class FakeTeacher:
    """Labels each window with tokens derived from its length; one window decodes to nothing."""

    eot, timestamp_begin = 90, 95

    def __init__(self):
        self.calls = []

    def encode(self, audio):
        return len(audio), np.full((6, 4), len(audio) % 7, dtype=np.float16)

    def label(self, handle, language, task, timestamps, previous, top_k):
        self.calls.append((language, task, timestamps, tuple(previous)))
        n = 0 if handle % 5 == 0 else 3 + handle % 4
        tokens = tuple(range(10, 10 + n))
        values = np.sort(np.random.default_rng(n).standard_normal((n + 1, top_k)), axis=1)[:, ::-1]
        return labels.PseudoLabel(
            prompt=(1, 2, 3),
            tokens=tokens,
            text=" ".join(f"w{t}" for t in tokens) * 3,
            avg_logprob=-0.2,
            no_speech_prob=0.01,
            finished=True,
            topk_values=values.astype(np.float16),
            topk_indices=np.tile(np.arange(top_k, dtype=np.int32), (n + 1, 1)),
        )


def test_label_dataset_writes_labels_cache_and_filters(tmp_path):
    options = data.DataOptions(hours=0.02, seed=1, languages={"en": 0.5, "de": 0.5}, backends={"espeak": 1})
    items = data.build_dataset(tmp_path, _corpus(), {"espeak": ToneSynth()}, options, log=lambda _: None)
    teacher = FakeTeacher()
    opts = labels.LabelOptions(top_k=4, limit=5, min_chars_per_second=0.0)
    counts = labels.label_dataset(tmp_path, teacher, opts, log=lambda _: None)
    assert counts["items"] == 5
    rows = [json.loads(line) for line in (tmp_path / "labels" / "labels.jsonl").read_text().splitlines()]
    langs = {i.id: i.lang for i in items}
    assert {r["task"] for r in rows if langs[r["item"]] == "en"} == {"transcribe"}
    for r in rows:
        if langs[r["item"]] != "en":  # non-English windows are decoded for translation too
            assert {x["task"] for x in rows if x["item"] == r["item"]} == {"transcribe", "translate"}
        assert (tmp_path / "labels" / "enc" / f"{r['item']}.npy").is_file()
        topk = tmp_path / "labels" / "topk" / f"{r['seq']}.npz"
        assert topk.is_file() == r["kept"]
        if r["kept"]:
            assert np.load(topk)["values"].shape == (len(r["tokens"]) + 1, 4)
        else:
            assert r["reason"]
    kept = labels.read_labels(tmp_path)
    assert len(kept) == sum(r["kept"] for r in rows)
    again = labels.label_dataset(tmp_path, FakeTeacher(), opts, log=lambda _: None)
    assert again["items"] == 0  # resumes: nothing left to do


def test_reject_reason_catches_hallucinations():
    base = FakeTeacher().label(6, "en", "transcribe", True, (), 2)
    opts = labels.LabelOptions()
    from dataclasses import replace

    assert labels.reject_reason(replace(base, text="   "), 5.0, opts) == "empty"
    loop = "thank you " * 40
    assert zlib.compress(loop.encode()) and labels.reject_reason(replace(base, text=loop), 20.0, opts) == "compression ratio"
    assert labels.reject_reason(replace(base, finished=False), 5.0, opts) == "no end-of-text"
    assert labels.reject_reason(replace(base, avg_logprob=-2.0), 5.0, opts) == "avg_logprob"
    assert labels.reject_reason(replace(base, text="Hi."), 20.0, opts) == "text length vs duration"
    assert labels.reject_reason(replace(base, text="A sentence of normal length."), 2.0, opts) is None


def test_label_shards_split_the_windows_and_read_back_together(tmp_path):
    options = data.DataOptions(hours=0.01, seed=2, languages={"en": 1.0}, backends={"espeak": 1})
    items = data.build_dataset(tmp_path, _corpus(), {"espeak": ToneSynth()}, options, log=lambda _: None)
    opts = labels.LabelOptions(top_k=2, min_chars_per_second=0.0)
    from dataclasses import replace

    for shard in (0, 1):
        labels.label_dataset(tmp_path, FakeTeacher(), replace(opts, shard=(shard, 2)), log=lambda _: None)
    files = sorted(p.name for p in (tmp_path / "labels").glob("labels*.jsonl"))
    assert files == ["labels-0-of-2.jsonl", "labels-1-of-2.jsonl"]
    rows = [json.loads(line) for f in files for line in (tmp_path / "labels" / f).read_text().splitlines()]
    assert sorted(r["item"] for r in rows) == sorted(i.id for i in items)
    assert len(labels.read_labels(tmp_path, kept_only=False)) == len(rows)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_data_command_builds_a_small_set(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "distill_draft.py"
    spec = importlib.util.spec_from_file_location("distill_draft", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "set"
    assert module.main(["data", "--out", str(out), "--hours", "0.004", "--languages", "en", "--backends", "espeak"]) == 0
    items = data.read_manifest(out)
    assert items and all(i.lang == "en" for i in items)
    assert all((out / i.audio).is_file() for i in items)
    assert module.main(["data", "--out", str(out), "--hours", "0.004"]) == 1  # refuses to overwrite
    assert "exists" in capsys.readouterr().err


def test_channel_effects_change_the_signal_as_named():
    from specscribe.models.distill.synth import channel_effects, reverb, speed, telephone

    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t) + 0.3 * np.sin(2 * np.pi * 6000 * t)).astype(np.float32)
    assert abs(len(speed(tone, 1.1)) - SAMPLE_RATE / 1.1) < 2
    wet = reverb(tone, random.Random(0), rt60=0.4, wet=0.8)
    assert len(wet) == len(tone) and not np.allclose(wet, tone, atol=1e-3)
    phone = telephone(tone)
    spectrum = np.abs(np.fft.rfft(phone[1000:-1000]))
    freqs = np.fft.rfftfreq(len(phone) - 2000, 1 / SAMPLE_RATE)
    assert spectrum[np.abs(freqs - 6000) < 50].max() < 0.01 * spectrum[np.abs(freqs - 1000) < 50].max()  # band-limited
    seen = set()
    for seed in range(30):
        out, applied = channel_effects(tone, random.Random(seed))
        assert out.dtype == np.float32 and np.isfinite(out).all()
        assert ("speed" in applied) == (len(out) != len(tone))
        seen |= set(applied)
    assert seen == {"speed", "reverb", "telephone"}


def test_effects_are_named_and_off_leaves_the_choices_as_before(tmp_path):
    """Effects draw from their own random stream: with them off, texts, languages and splits are the
    datasets of before (the shipped draft's recipe); with them on, the windows name their effects."""
    base = dict(hours=0.02, seed=4, languages={"en": 0.7, "de": 0.3}, backends={"espeak": 1})
    backends = {"espeak": ToneSynth()}
    on = data.build_dataset(tmp_path / "on", _corpus(), backends, data.DataOptions(**base), log=lambda _: None)
    off = data.build_dataset(tmp_path / "off", _corpus(), backends, data.DataOptions(**base, effects=False), log=lambda _: None)
    assert any("+" in v for i in on for v in i.voice.split(" + ")), [i.voice for i in on]
    assert not any("+speed" in i.voice or "+reverb" in i.voice or "+telephone" in i.voice for i in off)
    assert off[0].sources == on[0].sources  # the first text is picked before any effect is drawn
