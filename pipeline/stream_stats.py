"""A streaming session's figures: decode totals, counters, and its own load (the turnaround of its decodes).

pipeline/session.py reports them in its `stats` event (docs/protocol.md) and spaces its updates by the own
load's level (pipeline/load.py LagMeter, StreamOptions.own_load).
"""

from __future__ import annotations

import collections

from specscribe.models.types import SpecStats
from specscribe.pipeline.load import LagMeter, LoadPolicy


class StreamStats:
    """One stream's totals. Not thread-safe: use it from the session's event loop."""

    def __init__(self, load_policy: LoadPolicy) -> None:
        self.lag = LagMeter(load_policy)  # this stream's own decode turnaround (own_load)
        self._level_max = 0  # the highest level of self.lag so far
        self._spec = SpecStats()
        self._counts: collections.Counter[str] = collections.Counter()

    def account(self, stats: SpecStats, counter: str) -> None:
        """A decode's speculative figures, counted under counter ("updates", "translations")."""
        self._spec = self._spec + stats
        self._counts[counter] += 1

    def count(self, counter: str, n: int | bool = 1) -> None:
        self._counts[counter] += n

    def decoded(self, hyp, turnaround_s: float) -> None:
        """A caption decode came back (pipeline/stream_jobs.py Hypothesis) turnaround_s after it was submitted."""
        self.lag.observe(turnaround_s)
        self._level_max = max(self._level_max, self.lag.load().level)
        self.account(hyp.stats, "updates")
        self.count("rejected", bool(hyp.rejected))  # the reason, or ""
        self.count("continued", hyp.continued)
        self.count("retried", hyp.retried)

    def to_dict(self, audio_s: float, compute_s: float, finals: int) -> dict:
        """SpecStats totals plus stream figures (audio and compute seconds, real-time factor)."""
        out = self._spec.to_dict()
        out.update(
            audio_s=round(audio_s, 3),
            compute_s=round(compute_s, 3),
            rtf=round(compute_s / audio_s, 4) if audio_s else 0.0,
            **{k: self._counts[k] for k in ("updates", "withdrawn", "translations", "rejected", "continued", "retried")},
            finals=finals,
            stream_load=self._stream_load(),
        )
        return out

    def _stream_load(self) -> dict:
        """This stream's own load: now and its highest level. It sets only the update interval
        (session.py _update_factor), so keep_context and hold_unsure are left out."""
        own = self.lag.load().to_dict()
        return {**{k: own[k] for k in ("level", "lag_s", "update_factor")}, "level_max": self._level_max}
