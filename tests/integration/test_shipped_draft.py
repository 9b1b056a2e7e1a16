"""The shipped draft (models/drafts/base-draft.safetensors, a feature-level draft): it loads against base, its
bytes match the committed sha256, and on two real clips the engine's output with it is exactly the
output with `--draft none` (same engine, same default compute type), while it does draft.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specscribe.models.types import DecodeRequest

pytestmark = pytest.mark.integration

CHECKPOINT = Path(__file__).resolve().parents[2] / "models" / "drafts" / "base-draft.safetensors"


def test_checkpoint_matches_its_sha256():
    from specscribe.models.registry import sha256_file

    want = Path(str(CHECKPOINT) + ".sha256").read_text().split()[0]
    assert sha256_file(CHECKPOINT) == want
    assert CHECKPOINT.stat().st_size < 20 * 2**20


@pytest.fixture(scope="module")
def engines(base_model_dir):
    from specscribe.models.engines import EngineOptions
    from specscribe.models.spec_engine import SpecEngine

    # the fixed rule: every English first decode drafts with the shipped draft (the measured policy
    # would also try n-gram lookup and none: test_measured_policy.py)
    make = lambda draft: SpecEngine(base_model_dir, EngineOptions(  # noqa: E731
        engine="spec", model="base", draft=draft, draft_policy="fixed"))
    return make("auto"), make("none")


def test_auto_loads_the_shipped_checkpoint(engines):
    from specscribe.models.draft_loading import shipped_checkpoint

    with_draft, _ = engines
    assert shipped_checkpoint("base") == CHECKPOINT
    assert with_draft.draft is not None and with_draft.draft.vocab_ids is not None
    assert with_draft.draft.is_feature  # the feature-level draft (docs/draft_model.md)


@pytest.mark.parametrize("name", ["jfk", "0930"])
@pytest.mark.parametrize("timestamps", [True, False])
def test_shipped_draft_output_is_the_plain_output(engines, clips_dir, name, timestamps):
    from specscribe.clips import evaluation_windows

    with_draft, plain = engines
    audio = evaluation_windows(clips_dir)[name]
    request = DecodeRequest(task="transcribe", language="en", timestamps=timestamps)
    got = with_draft.decode(with_draft.encode(audio), request)
    want = plain.decode(plain.encode(audio), request)
    assert got.tokens == want.tokens and got.text == want.text
    assert got.stats.drafted > 0 and got.stats.accepted > 0  # the feature draft did propose
    assert got.stats.target_passes < want.stats.target_passes


def test_fallback_sampling_is_plain_and_reproducible(engines, clips_dir):
    """Temperature-fallback decodes run without drafts, so a seed gives one text on every run."""
    from specscribe.clips import evaluation_windows

    with_draft, plain = engines
    audio = evaluation_windows(clips_dir)["0870"]
    request = DecodeRequest(task="transcribe", language="en", temperature=0.8, seed=3)
    encoded = with_draft.encode(audio)
    first = with_draft.decode(encoded, request)
    again = with_draft.decode(encoded, request)
    assert first.tokens == again.tokens and first.stats.drafted == 0
    assert plain.decode(plain.encode(audio), request).tokens == first.tokens
