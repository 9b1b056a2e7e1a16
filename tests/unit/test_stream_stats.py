"""StreamStats: a session's decode totals, counters and own load in its `stats` event."""

from types import SimpleNamespace

from specscribe.models.types import SpecStats
from specscribe.pipeline.load import LoadPolicy
from specscribe.pipeline.stream_stats import StreamStats


def _hyp(rejected="", continued=False, retried=False, passes=1):
    return SimpleNamespace(stats=SpecStats(target_passes=passes), rejected=rejected, continued=continued, retried=retried)


def test_decodes_and_translations_are_counted_apart():
    figures = StreamStats(LoadPolicy())
    figures.decoded(_hyp(passes=3), 0.1)
    figures.decoded(_hyp(rejected="loop", continued=True, retried=True, passes=2), 0.1)
    figures.account(SpecStats(target_passes=4), "translations")
    figures.count("withdrawn")
    out = figures.to_dict(audio_s=10.0, compute_s=2.5, finals=7)
    assert (out["updates"], out["translations"], out["withdrawn"]) == (2, 1, 1)
    assert (out["rejected"], out["continued"], out["retried"]) == (1, 1, 1)
    assert out["target_passes"] == 9  # decodes and translations alike
    assert (out["audio_s"], out["compute_s"], out["rtf"], out["finals"]) == (10.0, 2.5, 0.25, 7)


def test_own_load_keeps_its_highest_level_after_the_lag_falls():
    figures = StreamStats(LoadPolicy())
    for _ in range(30):
        figures.decoded(_hyp(), 5.0)  # far behind: the top level
    top = figures.to_dict(1.0, 1.0, 0)["stream_load"]
    figures.lag.reset()
    after = figures.to_dict(1.0, 1.0, 0)["stream_load"]
    assert top["level"] == top["level_max"] > 0
    assert after["level"] == 0 and after["level_max"] == top["level_max"]
    assert figures.to_dict(0.0, 0.0, 0)["rtf"] == 0.0  # no audio yet
