"""--adapt-draft on the real base model and real clips, at the default compute type: the adapter
labels the engine's windows, trains, swaps a state in only through its gate, and the text never
changes; a saved adapted state loads with --draft-model and is refused for another target."""

from __future__ import annotations

import dataclasses

import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration

CLIPS = ["jfk", "0870", "0880", "0890"]


def _decode_all(engine, windows):
    request = DecodeRequest(task="transcribe", language="en", timestamps=True)
    out = []
    for name in CLIPS:
        window = 15.0 if name == "0880" else None  # a shorter encoder output, as streaming's --encoder-pad
        result = engine.decode(engine.encode(windows[name], window), request)
        if engine.adapter is not None:
            engine.adapter.drain()  # between windows, as a batch run does
        out.append(result)
    return out


@pytest.fixture(scope="module")
def runs(base_model_dir, clips_dir, tmp_path_factory):
    from specscribe.clips import evaluation_windows
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    saved = tmp_path_factory.mktemp("adapt") / "adapted.safetensors"
    windows = evaluation_windows(clips_dir)
    adapting = SpecEngine(base_model_dir, EngineOptions(model="base", adapt_draft=True, adapt_save=str(saved)))
    first_draft = adapting.draft
    # a gate check after every step, every other window held back, and any state admitted: so
    # that this short run swaps (the real gate is tested below)
    adapting.adapter.options = dataclasses.replace(adapting.adapter.options, check_every=1, holdout_every=2,
                                                   min_gain=-1.0, steps_per_window=1)
    adapted = _decode_all(adapting, windows)
    plain = SpecEngine(base_model_dir, EngineOptions(model="base", draft="none"))
    return {"adapting": adapting, "first_draft": first_draft, "adapted": adapted,
            "plain": _decode_all(plain, windows), "saved": saved, "windows": windows}


def test_adaptation_never_changes_the_output(runs):
    for got, want in zip(runs["adapted"], runs["plain"]):
        assert got.tokens == want.tokens and got.text == want.text
    assert sum(r.stats.drafted for r in runs["adapted"]) > 0  # the (adapting) draft did propose


def test_the_adapter_labels_trains_and_swaps(runs):
    engine = runs["adapting"]
    stats = engine.adapter.stats
    assert stats.labelled == len(CLIPS) and stats.held_out == len(CLIPS) // 2
    assert stats.steps > 0 and stats.checks > 0 and stats.swaps > 0
    assert engine.draft is not runs["first_draft"] and engine.draft.is_feature


def test_the_gate_refuses_a_state_that_does_not_win(runs):
    engine = runs["adapting"]
    adapter = engine.adapter
    trained, served = adapter.score()
    adapter.options = dataclasses.replace(adapter.options, min_gain=trained - served + 0.01)
    before, swaps = engine.draft, adapter.stats.swaps
    adapter._check()
    assert engine.draft is before and adapter.stats.swaps == swaps


def test_a_saved_state_loads_and_is_refused_for_another_target(runs, base_model_dir):
    from specscribe.models.draft import DraftDecoder
    from specscribe.models.engines import EngineOptions
    from specscribe.models.errors import ModelError
    from specscribe.models.spec_engine import SpecEngine

    saved = runs["saved"]
    assert saved.is_file() and (saved.parent / (saved.name + ".sha256")).is_file()
    loaded = SpecEngine(base_model_dir, EngineOptions(model="base", draft_model=str(saved)))
    assert loaded.draft is not None and loaded.draft.is_feature
    request = DecodeRequest(task="transcribe", language="en", timestamps=True)
    got = loaded.decode(loaded.encode(runs["windows"]["jfk"]), request)
    assert got.tokens == runs["plain"][0].tokens and got.stats.drafted > 0
    with pytest.raises(ModelError, match="another target"):
        DraftDecoder.load(saved, loaded.model.decoder, "0" * 64)


def test_adapt_draft_needs_the_spec_engine_and_a_draft(base_model_dir):
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.models.errors import ModelError
    from specscribe.models.spec_engine import SpecEngine

    with pytest.raises(ModelError, match="spec engine"):
        load_transcriber(EngineOptions(engine="ct2", adapt_draft=True))
    with pytest.raises(ModelError, match="needs a trained draft"):
        SpecEngine(base_model_dir, EngineOptions(model="base", draft="none", adapt_draft=True))
