"""A session's translations (pipeline/translations.py): the span of audio a group of finals is translated from."""

import asyncio

import numpy as np

from specscribe.models.types import SpecStats, Word
from specscribe.pipeline.audio import SAMPLE_RATE
from specscribe.pipeline.load import Load
from specscribe.pipeline.ring_buffer import RingBuffer
from specscribe.pipeline.stream_jobs import Translation
from specscribe.pipeline.translations import Translations


class _Scheduler:
    load = Load(0, 0.0)

    def __init__(self):
        self.jobs = []

    async def run(self, session_id, job, priority):
        self.jobs.append(job)
        return Translation("Yes.", (), SpecStats())


def test_a_span_never_cuts_its_own_words_when_neighbours_overlap():
    """DTW times of neighbouring words can overlap by hundredths: the last translated final ended at 5.00 s, the
    group's word starts at 4.95 s and the next partial at 4.96 s. The span kept [5.00, 4.96): a read that ran
    backwards raised ValueError and ended the session; it now covers the group's word at least."""
    async def main():
        ring = RingBuffer(SAMPLE_RATE * 45)
        ring.append(np.zeros(SAMPLE_RATE * 8, np.float32))
        scheduler = _Scheduler()
        events = []
        tr = Translations(scheduler, "s", 5.0, False, lambda type_, **f: events.append((type_, f)), lambda s: None)
        tr.add(1, (Word(4.0, 5.0, " America.", 0.9),))
        tr.start(True, ring, "en", float("inf"))
        tr.add(2, (Word(4.95, 5.02, " Yes.", 0.9),))
        tr.start(True, ring, "en", 4.96)
        await tr.drain()
        return scheduler, events

    scheduler, events = asyncio.run(main())
    assert len(scheduler.jobs) == 2 and [e[1]["id"] for e in events] == [1, 2]
