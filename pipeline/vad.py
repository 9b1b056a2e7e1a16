"""Streaming voice activity detection with Silero VAD v6 (the ONNX file faster-whisper ships).

The ONNX graph takes frames of 512 samples (32 ms at 16 kHz) preceded by the previous frame's
last 64 samples, plus an LSTM state (h, c); frames in one call run in order along the batch axis,
so a stream's state is carried across calls exactly. The ONNX session is stateless and shared;
every stream has its own `SileroVad` with its own state.

Hysteresis: speech starts after `min_speech` seconds of frames at or above `threshold`, and ends
after `min_silence` seconds below `threshold - 0.15`.
"""

from __future__ import annotations

import bisect
import copy
import functools
import os
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from specscribe.pipeline.audio import SAMPLE_RATE

FRAME = 512  # samples per VAD frame at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous frame prepended to each frame
STATE_SHAPE = (1, 1, 128)


@dataclass(frozen=True)
class VadOptions:
    """Attributes:
        threshold: speech probability at or above which a frame counts as speech.
        neg_threshold: probability below which a frame counts as silence (None: threshold - 0.15).
        min_speech: seconds of speech frames before speech starts (filters clicks).
        min_silence: seconds of silence frames that end speech.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech: float = 0.1
    min_silence: float = 0.6


class VadEvent(NamedTuple):
    """kind: "start" or "end"; offset: absolute sample offset (start: first speech frame; end: first silent frame)."""

    kind: Literal["start", "end"]
    offset: int


class SileroModel:
    """The shared, stateless ONNX session. `__call__` runs frames with a caller-owned state."""

    def __init__(self, path: str | None = None) -> None:
        import onnxruntime

        if path is None:
            import faster_whisper

            path = os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 4
        self._session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=opts)

    def __call__(
        self, frames: np.ndarray, h: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """frames: (n, CONTEXT + FRAME) float32; h, c: STATE_SHAPE. Returns probs (n,), h, c."""
        probs, h, c = self._session.run(None, {"input": frames, "h": h, "c": c})
        return np.asarray(probs, dtype=np.float32).reshape(-1), h, c


@functools.lru_cache(maxsize=1)
def shared_silero() -> SileroModel:
    """One ONNX session for the process (it holds no stream state)."""
    return SileroModel()


class SileroVad:
    """One stream's VAD: feed any number of samples, get speech start/end events in order."""

    def __init__(self, options: VadOptions = VadOptions(), model: SileroModel | None = None) -> None:
        self.options = options
        self._model = model if model is not None else shared_silero()
        self._h = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._c = np.zeros(STATE_SHAPE, dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._rest = np.zeros(0, dtype=np.float32)  # samples not yet a full frame
        self._offset = 0  # absolute offset of the next frame's first sample
        self._neg = options.neg_threshold if options.neg_threshold is not None else max(options.threshold - 0.15, 0.01)
        self._need_speech = max(1, round(options.min_speech * SAMPLE_RATE / FRAME))
        self._need_silence = max(1, round(options.min_silence * SAMPLE_RATE / FRAME))
        self.in_speech = False
        self._run_start = -1  # offset of the first frame of the current speech run (before start)
        self._run = 0
        self._silence_start = -1  # offset of the first silent frame while in speech
        self._silence = 0
        self.last_prob = 0.0
        self._speech_frames: list[int] = []  # offsets of recent frames at or above threshold

    @property
    def offset(self) -> int:
        """Samples consumed so far (complete frames only)."""
        return self._offset

    def fork(self) -> "SileroVad":
        """A copy with this stream's state, to hear audio ahead without moving this one
        (pipeline/session.py ``lookahead``); it shares the ONNX session."""
        twin = copy.copy(self)
        twin._speech_frames = list(self._speech_frames)
        return twin

    def process(self, samples: np.ndarray) -> list[VadEvent]:
        """samples: float32 mono 16 kHz, any length (n,). Returns the events of the complete frames."""
        x = np.concatenate([self._rest, np.asarray(samples, dtype=np.float32).reshape(-1)])
        n = x.size // FRAME
        self._rest = x[n * FRAME :]
        if n == 0:
            return []
        frames = x[: n * FRAME].reshape(n, FRAME)  # (n, FRAME)
        context = np.concatenate([self._context[None], frames[:-1, -CONTEXT:]])  # (n, CONTEXT)
        probs, self._h, self._c = self._model(np.concatenate([context, frames], axis=1), self._h, self._c)
        self._context = frames[-1, -CONTEXT:].copy()
        events: list[VadEvent] = []
        for p in probs:
            self._step(float(p), events)
            if p >= self.options.threshold:
                self._speech_frames.append(self._offset)
            self._offset += FRAME
        self.last_prob = float(probs[-1])
        if len(self._speech_frames) > 4096:  # keep about the last 2 minutes of speech frames
            del self._speech_frames[:-2048]
        return events

    @property
    def silence_seconds(self) -> float:
        """Seconds of silence since the last speech frame, while speech is open (0 outside speech)."""
        return self._silence * FRAME / SAMPLE_RATE if self.in_speech else 0.0

    def speech_seconds(self, start: int, end: int) -> float:
        """Seconds of speech frames (at or above threshold) starting in [start, end) (recent audio)."""
        lo, hi = self._frames_in(start, end)
        return (hi - lo) * FRAME / SAMPLE_RATE

    def speech_frames(self, start: int, end: int) -> np.ndarray:
        """(m,) offsets (samples) of the speech frames starting in [start, end) (recent audio)."""
        lo, hi = self._frames_in(start, end)
        return np.asarray(self._speech_frames[lo:hi], dtype=np.int64)

    def _frames_in(self, start: int, end: int) -> tuple[int, int]:
        """Indices [lo, hi) of the recent speech frames that start in [start, end)."""
        return bisect.bisect_left(self._speech_frames, start), bisect.bisect_left(self._speech_frames, end)

    def flush(self) -> list[VadEvent]:
        """End of stream: close open speech at the last sample seen."""
        end = self._offset + self._rest.size
        if self.in_speech:
            self.in_speech = False
            return [VadEvent("end", self._silence_start if self._silence_start >= 0 else end)]
        return []

    def _step(self, p: float, events: list[VadEvent]) -> None:
        o = self.options
        if not self.in_speech:
            if p >= o.threshold:
                if self._run == 0:
                    self._run_start = self._offset
                self._run += 1
                if self._run >= self._need_speech:
                    self.in_speech = True
                    self._silence, self._silence_start = 0, -1
                    events.append(VadEvent("start", self._run_start))
            elif p < self._neg:
                self._run = 0
            return
        if p < self._neg or (self._silence > 0 and p < o.threshold):
            if self._silence == 0:
                self._silence_start = self._offset
            self._silence += 1
            if self._silence >= self._need_silence:
                self.in_speech = False
                self._run = 0
                events.append(VadEvent("end", self._silence_start))
        elif p >= o.threshold:
            self._silence, self._silence_start = 0, -1


class NoVad:
    """Treats everything as speech (StreamOptions.vad=False): one start, no end."""

    in_speech = False
    silence_seconds = 0.0

    def process(self, samples: np.ndarray) -> list[VadEvent]:
        if self.in_speech:
            return []
        self.in_speech = True
        return [VadEvent("start", 0)]

    def flush(self) -> list[VadEvent]:
        return []

    def speech_seconds(self, start: int, end: int) -> float:
        return (end - start) / SAMPLE_RATE

    def speech_frames(self, start: int, end: int) -> None:
        """Not known frame by frame (a decode cannot tell where it stopped early)."""
        return None
