"""A fixed-size circular audio buffer addressed by absolute sample offsets.

Offsets count samples since the stream started (offset 0 = the first sample ever appended), so
callers never re-base positions when old audio is dropped. Storage is one preallocated numpy
array; appends copy into it (at most two slices at the wrap), never grow it.
"""

from __future__ import annotations

import numpy as np


class RingBuffer:
    """Holds the most recent `capacity` samples of a stream.

    Attributes:
        capacity: the most samples held at once.
        start: absolute offset of the oldest sample held.
        end: absolute offset one past the newest sample (= samples appended so far).
    """

    def __init__(self, capacity: int, dtype=np.float32) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = int(capacity)
        self._data = np.zeros(self.capacity, dtype=dtype)  # (capacity,)
        self.start = 0
        self.end = 0

    def __len__(self) -> int:
        return self.end - self.start

    def append(self, samples: np.ndarray) -> None:
        """Append samples (n,). When full, the oldest samples are dropped (start moves forward)."""
        x = np.asarray(samples, dtype=self._data.dtype).reshape(-1)
        n = x.size
        if n == 0:
            return
        if n >= self.capacity:  # only the newest `capacity` samples can survive
            x = x[n - self.capacity :]
            skipped = n - self.capacity
            self.end += skipped
            self.start = self.end
            n = self.capacity
        pos = self.end % self.capacity
        first = min(n, self.capacity - pos)
        self._data[pos : pos + first] = x[:first]
        if first < n:
            self._data[: n - first] = x[first:]
        self.end += n
        self.start = max(self.start, self.end - self.capacity)

    def read(self, start: int, end: int) -> np.ndarray:
        """A copy of samples [start, end), shape (end - start,). Raises IndexError outside [self.start, self.end]."""
        if start > end:
            raise ValueError(f"read({start}, {end}): start after end")
        if start < self.start or end > self.end:
            raise IndexError(f"read({start}, {end}) outside the held range [{self.start}, {self.end})")
        n = end - start
        out = np.empty(n, dtype=self._data.dtype)
        pos = start % self.capacity
        first = min(n, self.capacity - pos)
        out[:first] = self._data[pos : pos + first]
        if first < n:
            out[first:] = self._data[: n - first]
        return out

    def trim(self, before: int) -> None:
        """Forget samples before absolute offset `before` (clamped to what is held)."""
        self.start = min(max(self.start, int(before)), self.end)
