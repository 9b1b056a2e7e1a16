"""Progress bars for batch transcription: one for the batch, one for the current file.

Both count seconds of audio and show speed as × real time and an ETA. They go to stderr and
are off when stderr is not a terminal or with --quiet (then every method is a no-op).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class BatchProgress:
    """tqdm bars over audio seconds. Use from one thread."""

    def __init__(self, total_seconds: float, n_files: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.n_files = n_files
        self.files_done = 0
        self.audio_done = 0.0
        self.started = time.perf_counter()
        self._batch = self._file = None
        self._file_pos = 0.0
        if enabled:
            from tqdm import tqdm

            self._tqdm = tqdm
            self._batch = tqdm(
                total=round(max(total_seconds, 0.0), 1) or None, unit="s", desc=f"batch 0/{n_files}",
                file=self.stream, position=0, leave=True, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s audio [{elapsed}<{remaining}{postfix}]",
            )

    @staticmethod
    def wanted(quiet: bool, stream: TextIO | None = None) -> bool:
        stream = stream or sys.stderr
        return not quiet and hasattr(stream, "isatty") and stream.isatty()

    def start_file(self, name: str, duration: float) -> None:
        self._file_pos = 0.0
        if not self.enabled:
            return
        self._file = self._tqdm(
            total=round(duration, 1), unit="s", desc=name[-40:], file=self.stream, position=1, leave=False,
            dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]",
        )

    def advance_file(self, seconds_done: float) -> None:
        """seconds_done: position reached in the current file."""
        step = max(0.0, seconds_done - self._file_pos)
        self._file_pos = max(self._file_pos, seconds_done)
        if self.enabled and self._file is not None and step:
            self._file.update(round(step, 2))
        self._advance_batch(step)

    def finish_file(self, duration: float = 0.0) -> None:
        """A file ended (done, failed or skipped); duration: its audio seconds not yet counted."""
        self.files_done += 1
        if duration > self._file_pos:
            self._advance_batch(duration - self._file_pos)
        self._file_pos = 0.0
        if self.enabled:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._batch.set_description_str(f"batch {self.files_done}/{self.n_files}")

    def _advance_batch(self, step: float) -> None:
        self.audio_done += step
        if self.enabled and step:
            self._batch.update(round(step, 2))
            wall = time.perf_counter() - self.started
            self._batch.set_postfix_str(f"{self.audio_done / wall:.1f}x real time" if wall > 0 else "")

    def close(self) -> None:
        if self.enabled:
            if self._file is not None:
                self._file.close()
            self._batch.close()
