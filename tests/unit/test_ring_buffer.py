"""RingBuffer: absolute offsets, reads across the wrap, trimming, overflow."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscribe.pipeline.ring_buffer import RingBuffer


def test_offsets_and_read_across_wrap():
    rb = RingBuffer(10)
    data = np.arange(100, dtype=np.float32)
    rb.append(data[:7])
    assert (rb.start, rb.end, len(rb)) == (0, 7, 7)
    rb.append(data[7:15])  # wraps; the oldest 5 are dropped
    assert (rb.start, rb.end) == (5, 15)
    np.testing.assert_array_equal(rb.read(5, 15), data[5:15])
    np.testing.assert_array_equal(rb.read(8, 12), data[8:12])
    with pytest.raises(IndexError):
        rb.read(4, 6)
    with pytest.raises(IndexError):
        rb.read(10, 16)


def test_trim_moves_start_only_forward_and_is_clamped():
    rb = RingBuffer(16)
    rb.append(np.arange(12, dtype=np.float32))
    rb.trim(5)
    assert rb.start == 5 and len(rb) == 7
    rb.trim(3)  # never backwards
    assert rb.start == 5
    rb.trim(100)  # never past the end
    assert rb.start == rb.end == 12
    rb.append(np.arange(12, 30, dtype=np.float32))
    np.testing.assert_array_equal(rb.read(14, 30), np.arange(14, 30, dtype=np.float32))


def test_append_larger_than_capacity_keeps_newest():
    rb = RingBuffer(8)
    rb.append(np.arange(3, dtype=np.float32))
    rb.append(np.arange(3, 23, dtype=np.float32))
    assert (rb.start, rb.end) == (15, 23)
    np.testing.assert_array_equal(rb.read(15, 23), np.arange(15, 23, dtype=np.float32))


def test_storage_is_preallocated():
    rb = RingBuffer(32)
    storage = rb._data
    for i in range(50):
        rb.append(np.full(7, i, np.float32))
    assert rb._data is storage and rb._data.size == 32


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(4, 40),
    ops=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60)), min_size=1, max_size=30),
)
def test_matches_a_plain_array_model(cap, ops):
    rb = RingBuffer(cap)
    everything = np.zeros(0, np.float32)
    start = 0
    for n, trim in ops:
        chunk = np.arange(everything.size, everything.size + n, dtype=np.float32)
        everything = np.concatenate([everything, chunk])
        rb.append(chunk)
        start = max(start, everything.size - cap)
        assert (rb.start, rb.end) == (start, everything.size)
        np.testing.assert_array_equal(rb.read(rb.start, rb.end), everything[rb.start :])
        t = min(max(start, trim), everything.size)
        rb.trim(trim)
        start = t
        assert rb.start == start
