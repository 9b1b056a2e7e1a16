"""Audio a streaming session has been given and not yet processed: a queue of chunks, taken in slices.

pipeline/session.py inserts into it as audio arrives and takes at most a slice at a time, so that the
decoded span stays under its limit even when much audio waits (a file read without real-time pacing, a
client that catches up after a stall).
"""

from __future__ import annotations

import collections
from typing import Iterator

import numpy as np


class PendingAudio:
    """Chunks of float32 mono samples, first in first out. Not thread-safe."""

    def __init__(self) -> None:
        self._chunks: collections.deque[np.ndarray] = collections.deque()
        self.samples = 0  # samples waiting

    def __bool__(self) -> bool:
        return bool(self._chunks)

    def __iter__(self) -> Iterator[np.ndarray]:
        """The waiting chunks, oldest first."""
        return iter(self._chunks)

    def put(self, x: np.ndarray) -> None:
        """x: float32, shape (n,), n > 0."""
        self._chunks.append(x)
        self.samples += x.size

    def take(self, limit: int) -> np.ndarray:
        """The oldest waiting samples, at most limit of them (limit > 0; call only when not empty), shape (m,)."""
        parts, n = [], 0
        while self._chunks and n < limit:
            chunk = self._chunks.popleft()
            if n + chunk.size > limit:
                self._chunks.appendleft(chunk[limit - n :])
                chunk = chunk[: limit - n]
            parts.append(chunk)
            n += chunk.size
        self.samples -= n
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
