"""PendingAudio: a session's queue of audio not processed yet, taken in slices."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specscribe.pipeline.pending_audio import PendingAudio


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=8), limit=st.integers(1, 70))
def test_slices_give_back_every_sample_in_order(sizes, limit):
    pending = PendingAudio()
    stream = np.arange(sum(sizes), dtype=np.float32)
    at = 0
    for n in sizes:
        pending.put(stream[at : at + n])
        at += n
    taken = []
    while pending:
        before = pending.samples
        part = pending.take(limit)
        assert 0 < part.size <= limit
        assert pending.samples == before - part.size
        taken.append(part)
    assert pending.samples == 0
    np.testing.assert_array_equal(np.concatenate(taken), stream)


def test_iteration_shows_the_waiting_chunks_without_taking_them():
    pending = PendingAudio()
    pending.put(np.ones(5, np.float32))
    pending.put(np.zeros(3, np.float32))
    assert pending.take(2).size == 2
    assert [c.size for c in pending] == [3, 3]
    assert pending.samples == 6
