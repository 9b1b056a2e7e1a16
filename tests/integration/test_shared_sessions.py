"""Four streaming sessions on one scheduler, their decodes sharing the target's passes, on the real model
at the default compute type: each session's events are exactly those it gets alone.

The audio is fed in fixed chunks (each `process()` awaited), so a session's updates depend only on
its audio, not on timing. Degradation is switched off here (it changes update timing on purpose:
pipeline/load.py); what is tested is that sharing passes changes nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from specscribe.clips import librivox_clips
from specscribe.pipeline.audio import SAMPLE_RATE, load_audio
from specscribe.pipeline.load import LoadPolicy
from specscribe.pipeline.scheduler import ModelScheduler, SchedulerOptions
from specscribe.pipeline.session import StreamSession
from specscribe.pipeline.types import StreamOptions

pytestmark = pytest.mark.integration
NO_DEGRADATION = SchedulerOptions(load=LoadPolicy(thresholds=(float("inf"),) * 3))
CHUNK = 1.0  # one update per second of audio: the property holds at any chunk, and fewer updates keep the test short


@pytest.fixture(scope="module")
def engine(base_model_dir):
    from specscribe.models.engines import EngineOptions, load_transcriber

    return load_transcriber(EngineOptions(model=str(base_model_dir)))  # spec, compute type auto


@pytest.fixture(scope="module")
def streams(clips_dir):
    clips = [load_audio(clips_dir / "jfk.flac")] + [load_audio(p) for p in sorted(librivox_clips(clips_dir))[:3]]
    options = [StreamOptions(language="en"), StreamOptions(language="en"),
               StreamOptions(language=None), StreamOptions(language="en", translate=True)]
    return list(zip(clips, options))


async def feed(session: StreamSession, audio) -> list[tuple]:
    events, step = [], int(CHUNK * SAMPLE_RATE)
    for i in range(0, audio.size, step):
        session.insert_audio(audio[i : i + step])
        events += await session.process()
    events += await session.finish()
    # everything but wall-clock fields
    return [(e.type, e.id, e.start, e.end, e.text) for e in events if e.type != "stats"]


def run_sessions(engine, streams) -> tuple[list[list[tuple]], ModelScheduler]:
    async def main():
        scheduler = ModelScheduler(engine, NO_DEGRADATION)
        try:
            sessions = [StreamSession(scheduler, opts, f"s{i}") for i, (_, opts) in enumerate(streams)]
            return await asyncio.gather(*(feed(s, audio) for s, (audio, _) in zip(sessions, streams))), scheduler
        finally:
            await scheduler.close()

    return asyncio.run(main())


def test_concurrent_sessions_match_their_single_session_transcripts(engine, streams):
    alone = [run_sessions(engine, [stream])[0][0] for stream in streams]
    together, scheduler = run_sessions(engine, streams)
    for i, (a, t) in enumerate(zip(alone, together)):
        assert any(e[0] == "final" and e[4] for e in a), i
        assert t == a, f"session {i} differs when sharing passes"
    assert any(e[0] == "translation" for e in together[3])
    assert scheduler.shared_steps > 0  # some passes did carry more than one session's decode
