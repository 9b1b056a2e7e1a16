"""How busy the model is, and what the server gives up first when it cannot keep up.

The signal is the *lag*: how long caption jobs (streaming updates and finals) take from being
submitted to their result (waiting for the model, then their own encode, decode and alignment),
smoothed over recent jobs. Alone on the model an update takes a few tenths of a second; the lag
rises with the number of sessions times the cost of an update, whatever the machine (waiting alone
would miss it: with shared passes a job starts at once and then runs slower). From the lag, a level:

    level  lag (default)   what changes
    0      < 0.5 s         nothing: updates every update_interval, translations as sentences end,
                           unsure words held over a pause (StreamOptions.hold_unsure)
    1      < 1.0 s         updates every 2 x update_interval; translations wait for an utterance end; a
                           pause commits the unsure words at once
    2      < 2.0 s         updates every 4 x update_interval (partials for fewer sessions at a time);
                           decodes drop the committed context kept before an utterance (keep_context)
                           and encode at most StreamOptions.loaded_encoder_pad (2 s) of padding
    3      >= 2.0 s        updates every 8 x update_interval, no kept context, the short padding; new
                           sessions are refused with `busy`

The lag is the larger of the smoothed turnaround and the wait of the oldest caption job still waiting,
so a burst (many sessions starting at once) raises the level before its jobs come back. A session also
keeps a LagMeter of its own decodes' turnaround and spaces its updates by the higher of the two levels
(pipeline/session.py `_update_factor`, StreamOptions.own_load): the scheduler's lag resets whenever the model
is idle, which for a lone stream is between every two of its decodes, so on a CPU too slow for the model (an
AVX2-only EPYC, where a lone conversation update takes 1-3 s) only the stream's own meter sees that it is behind
real time; that meter starts afresh with an utterance after a long pause, whose decodes are short again. The
rest of a level (kept context, held words, translations) follows the scheduler's lag alone:
dropping the context cost a lone stream there 5-8 WER points on conversation (docs/benchmarks.md). The
thresholds are set for finals within about 2.5 s: an update alone takes 0.1-0.2 s on a 2-core
AMX Xeon, so level 1 means several sessions' work queued ahead of each job.

Dropping the kept context makes each decode cheaper (it re-encodes and re-decodes up to keep_context
seconds of audio whose words are already final) at some accuracy on conversation, where a short turn
is heard without the turns before it (docs/benchmarks.md).

Finals are never dropped: an utterance's last decode runs at the highest priority at every level,
and while one decodes no other job starts (pipeline/scheduler.py); a waiting update that newer audio
has made stale is withdrawn (web/listen.py). A session already streaming is never closed for load.
Only a stream that falls max_backlog_seconds behind (protocol Limits) is closed, as a last resort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadPolicy:
    """Attributes: thresholds (lag seconds at which levels 1, 2 and 3 begin); smoothing (weight of
    the newest job's wait in the running lag)."""

    thresholds: tuple[float, float, float] = (0.5, 1.0, 2.0)
    smoothing: float = 0.3

    def level(self, lag: float) -> int:
        return sum(lag >= t for t in self.thresholds)


@dataclass(frozen=True)
class Load:
    """The model's load as sessions and the server see it. Attributes: level (0-3), lag_s."""

    level: int = 0
    lag_s: float = 0.0

    @property
    def update_factor(self) -> int:
        """update_interval is multiplied by this."""
        return 2**self.level

    @property
    def translate_early(self) -> bool:
        """Translate at sentence ends (else only when an utterance ends)."""
        return self.level == 0

    @property
    def keep_context(self) -> bool:
        """Decodes keep the committed audio before an utterance as context (StreamOptions.keep_context)."""
        return self.level < 2

    def encoder_pad(self, pad: float, loaded: float | None) -> float:
        """The encoder padding a decode gets (StreamOptions.encoder_pad, loaded_encoder_pad): at most `loaded`
        from level 2 on. The encoder is about half of a live decode's model time; at 16 clients on a 2-core
        AMD EPYC (AVX512-BF16) a 2 s pad from level 2 made the final latency median 2.4 s instead of 3.4 s and
        the p90 4.9 s instead of 5.7 s, WER the same (docs/benchmarks.md)."""
        return min(pad, loaded) if loaded is not None and self.level >= 2 else pad

    @property
    def hold_unsure(self) -> bool:
        """At a pause, unsure words wait for the speech after it (StreamOptions.hold_unsure); under load
        they are committed with the utterance: the next utterance's decode that would settle them comes late."""
        return self.level == 0

    @property
    def accepting(self) -> bool:
        """New sessions are admitted."""
        return self.level < 3

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "lag_s": round(self.lag_s, 3), "update_factor": self.update_factor,
                "keep_context": self.keep_context, "hold_unsure": self.hold_unsure}


class LagMeter:
    """The smoothed turnaround of caption jobs. Written by the model thread (and by a withdrawal, on the
    event loop), read by the event loop: a float swap under the GIL, where a lost observation is harmless."""

    def __init__(self, policy: LoadPolicy = LoadPolicy()) -> None:
        self.policy = policy
        self.lag = 0.0

    def observe(self, wait_s: float) -> None:
        a = self.policy.smoothing
        self.lag = (1 - a) * self.lag + a * max(wait_s, 0.0)

    def reset(self) -> None:
        self.lag = 0.0

    def load(self, waiting_s: float = 0.0) -> Load:
        """The load from the smoothed lag, or from waiting_s (the oldest waiting job's wait) if longer."""
        lag = max(self.lag, waiting_s)
        return Load(self.policy.level(lag), lag)
