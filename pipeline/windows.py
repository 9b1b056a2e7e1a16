"""Cut a long recording into decode windows of at most 30 s at speech (VAD) boundaries.

Choice: each window is a contiguous span of the ORIGINAL audio, decoded at its real offset.
Silero finds speech chunks (split at silences of at least ``min_silence`` and never longer
than a window); consecutive chunks are packed into one window while the window stays within
``max_window`` seconds and the silence before the next chunk is at most ``max_gap``.
Longer silences are never decoded at all (no decode, so no "Thank you." on silence), and
timestamps need no map: absolute = window start + window-relative time. The price, compared
with faster-whisper's way (concatenate all speech, then map timestamps back), is a few more
windows on sparse speech; the gain is that Whisper hears real pauses and words cannot straddle
a splice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from specscribe.pipeline.audio import CHUNK_LENGTH, SAMPLE_RATE

SpeechDetector = Callable[[np.ndarray], Sequence[tuple[int, int]]]


@dataclass(frozen=True)
class VadOptions:
    """Silero VAD settings for batch files.

    Attributes:
        threshold: speech probability above which a 32 ms frame is speech.
        min_silence: seconds of silence that end a speech chunk. Short (0.5 s, where faster-whisper
            uses 2 s) so that windows can be filled close to 30 s, cut at a pause: on the
            203 s lecture this gives 8 windows instead of 10 (each costs one full encoder pass).
        speech_pad: seconds added on each side of a chunk.
        min_speech: chunks shorter than this (seconds) are dropped.
    """

    threshold: float = 0.5
    min_silence: float = 0.5
    speech_pad: float = 0.4
    min_speech: float = 0.0


@dataclass(frozen=True)
class Window:
    """A span of the file to encode once and decode.

    Attributes:
        start, end: sample offsets in the file (end exclusive), end - start <= max_window.
        remainder: the rest of a window that a decode ended early (decoded again).
    """

    start: int
    end: int
    remainder: bool = False

    @property
    def offset(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def duration(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE


def silero_speech(options: VadOptions = VadOptions(), max_chunk: float = CHUNK_LENGTH) -> SpeechDetector:
    """A SpeechDetector running faster-whisper's shipped Silero v6 ONNX; chunks <= max_chunk s."""

    def detect(audio: np.ndarray) -> list[tuple[int, int]]:
        from faster_whisper.vad import VadOptions as FwVadOptions, get_speech_timestamps

        fw = FwVadOptions(
            threshold=options.threshold,
            min_speech_duration_ms=int(options.min_speech * 1000),
            max_speech_duration_s=max_chunk,
            min_silence_duration_ms=int(options.min_silence * 1000),
            speech_pad_ms=int(options.speech_pad * 1000),
        )
        if len(audio) == 0:
            return []
        return [(int(c["start"]), int(c["end"])) for c in get_speech_timestamps(audio, fw)]

    return detect


def plan_windows(
    chunks: Sequence[tuple[int, int]],
    n_samples: int,
    max_window: float = CHUNK_LENGTH,
    max_gap: float = 4.0,
) -> list[Window]:
    """Pack speech chunks (sample spans, sorted) into windows of at most max_window seconds.

    A chunk longer than max_window is cut into pieces of max_window (the VAD normally
    prevents that). Windows never overlap and stay inside [0, n_samples).
    """
    limit = int(max_window * SAMPLE_RATE)
    gap_limit = int(max_gap * SAMPLE_RATE)
    pieces: list[tuple[int, int]] = []
    for start, end in sorted(chunks):
        start, end = max(0, start), min(n_samples, end)
        if pieces and start < pieces[-1][1]:
            start = pieces[-1][1]  # overlapping padded chunks
        while end - start > limit:
            pieces.append((start, start + limit))
            start += limit
        if end > start:
            pieces.append((start, end))
    windows: list[Window] = []
    cur_start = cur_end = None
    for start, end in pieces:
        if cur_start is not None and end - cur_start <= limit and start - cur_end <= gap_limit:
            cur_end = end
            continue
        if cur_start is not None:
            windows.append(Window(cur_start, cur_end))
        cur_start, cur_end = start, end
    if cur_start is not None:
        windows.append(Window(cur_start, cur_end))
    return windows
