"""Progress bars for batch transcription: one for the batch, one for each file in progress.

Several files can be in progress at once (their lanes share the engine's passes), each with its
own bar under the batch bar. Bars count seconds of audio (the batch bar hours, for a batch of an hour
or more) and show speed as × real time and an
ETA. They go to stderr and are off when stderr is not a terminal or with --quiet (then every
method only keeps the counts).
"""

from __future__ import annotations

import sys
import time
from typing import Hashable, TextIO


class BatchProgress:
    """tqdm bars over audio seconds. Use from one thread."""

    def __init__(self, total_seconds: float, n_files: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.n_files = n_files
        self.files_done = 0
        self.audio_done = 0.0
        self.started = time.perf_counter()
        self._batch = None
        self._files: dict[Hashable, list] = {}  # key -> [seconds counted, bar or None, slot]
        # the batch bar counts audio in seconds, or in hours for a batch of an hour or more
        self._unit, self._scale = ("h", 3600.0) if total_seconds >= 3600 else ("s", 1.0)
        if enabled:
            from tqdm import tqdm

            digits = 2 if self._unit == "h" else 0
            self._tqdm = tqdm
            self._batch = tqdm(
                total=round(max(total_seconds, 0.0) / self._scale, 3) or None, unit=self._unit,
                desc=f"batch 0/{n_files}", file=self.stream, position=0, leave=True, dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                f"{{n:.{digits}f}}/{{total:.{digits}f}} {self._unit} audio [{{elapsed}}<{{remaining}}{{postfix}}]",
            )

    @staticmethod
    def wanted(quiet: bool, stream: TextIO | None = None) -> bool:
        stream = stream or sys.stderr
        return not quiet and hasattr(stream, "isatty") and stream.isatty()

    def start_file(self, key: Hashable, name: str, duration: float) -> None:
        bar, slot = None, min(set(range(1, len(self._files) + 2)) - {f[2] for f in self._files.values()})
        if self.enabled:
            bar = self._tqdm(
                total=round(duration, 1), unit="s", desc=name[-40:], file=self.stream, position=slot, leave=False,
                dynamic_ncols=True, bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]",
            )
        self._files[key] = [0.0, bar, slot]

    def advance_file(self, key: Hashable, seconds: float) -> None:
        """seconds more of the file's audio are done."""
        entry = self._files.get(key)
        if entry is None or seconds <= 0:
            return
        entry[0] += seconds
        if entry[1] is not None:
            entry[1].update(round(seconds, 2))
        self._advance_batch(seconds)

    def finish_file(self, key: Hashable | None = None, duration: float = 0.0) -> None:
        """A file ended (done, failed or skipped); duration: its audio seconds, of which what
        advance_file did not count yet is counted now."""
        self.files_done += 1
        counted, bar, _ = self._files.pop(key, [0.0, None, 0])
        if duration > counted:
            self._advance_batch(duration - counted)
        if bar is not None:
            bar.close()
        if self.enabled:
            self._batch.set_description_str(f"batch {self.files_done}/{self.n_files}")

    def _advance_batch(self, step: float) -> None:
        self.audio_done += step
        if self.enabled and step:
            self._batch.update(round(step / self._scale, 5))
            wall = time.perf_counter() - self.started
            self._batch.set_postfix_str(f"{self.audio_done / wall:.1f}x real time" if wall > 0 else "")

    def close(self) -> None:
        for _, bar, _ in self._files.values():
            if bar is not None:
                bar.close()
        self._files.clear()
        if self.enabled:
            self._batch.close()
