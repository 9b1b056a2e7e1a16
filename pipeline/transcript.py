"""The options and results of long-form transcription (pipeline/longform.py), as frozen types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from specscribe.models.types import DecodeRequest, Segment, SpecStats, Task

TaskChoice = Literal["transcribe", "translate", "both"]


@dataclass(frozen=True)
class LongformOptions:
    """How to decode a long recording.

    Attributes:
        language: ISO code, or None to detect it once per file on the first speech window.
        task: "transcribe", "translate" (to English) or "both" (one encoding, two decodes).
        word_timestamps: align words (one extra pass per window and task).
        temperatures: fallback schedule; the first is used unless a guard fails.
        compression_ratio_threshold: gzip ratio above which a decode counts as repetitive.
        logprob_threshold: avg_logprob below which a decode counts as failed.
        no_speech_threshold: no_speech_prob above which (with a low avg_logprob) a window is silence.
        condition_on_previous_text: prompt each window with the previous windows' text.
        prompt_reset_on_temperature: reset the prompt after a decode at a temperature above this.
        initial_prompt: text placed before the first window's prompt.
        max_window: seconds per window (Whisper: 30).
        max_gap: seconds of silence still kept inside one window.
        seed: base seed for sampling at temperature > 0 (per window + attempt), for reproducibility.
        min_remainder_speech: seconds of VAD speech left after a decode's last segment that make
            the rest of the window decode again (Whisper stopped early). 1 s: more than the VAD's
            0.4 s pad, less than a short phrase (Whisper tends to drop a clause that ends within a
            second or two of a window's end; scripts/eval_remainder.py measures it).
        beam_size, patience, length_penalty: beam search at temperature 0 (1: greedy, the
            default), faster-whisper's semantics (models/beam.py).
        best_of: hypotheses sampled per fallback temperature; the best is kept (faster-whisper: 5).
        n_best: alternatives per segment (1: none), at most beam_size.
        multilingual: detect the language of every window (mixed-language audio), not once per file.
        hotwords: words to favour (faster-whisper's hotwords: a prompt after <|startofprev|>).
    """

    language: str | None = None
    task: TaskChoice = "transcribe"
    word_timestamps: bool = False
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: str | None = None
    max_window: float = 30.0
    max_gap: float = 4.0
    seed: int = 0
    min_remainder_speech: float = 1.0
    beam_size: int = 1
    patience: float = 1.0
    length_penalty: float = 1.0
    best_of: int = 5
    n_best: int = 1
    multilingual: bool = False
    hotwords: str = ""

    def decode_request(self, task: Task, language: str | None, prompt: tuple[int, ...]) -> DecodeRequest:
        """A window's temperature-0 request (fallback_program varies the temperature and seed)."""
        return DecodeRequest(
            task=task, language=language, prompt_tokens=prompt, beam_size=self.beam_size, patience=self.patience,
            length_penalty=self.length_penalty, best_of=self.best_of, n_best=self.n_best, hotwords=self.hotwords,
        )


@dataclass(frozen=True)
class WindowInfo:
    """What happened to one window and one task.

    Attributes:
        index: window number in the file.
        start, end: absolute seconds of the window.
        task: "transcribe" or "translate".
        temperature: temperature of the kept decode.
        attempts: decodes run (1 + fallbacks).
        skipped: the window was judged silence (no segments kept).
        avg_logprob, no_speech_prob, compression_ratio: of the kept decode.
        stats: SpecStats summed over all its decodes.
    """

    index: int
    start: float
    end: float
    task: Task
    temperature: float
    attempts: int
    skipped: bool
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    stats: SpecStats

    def to_dict(self) -> dict:
        return {
            "index": self.index, "start": round(self.start, 3), "end": round(self.end, 3),
            "task": self.task, "temperature": self.temperature, "attempts": self.attempts,
            "skipped": self.skipped, "avg_logprob": round(self.avg_logprob, 4),
            "no_speech_prob": round(self.no_speech_prob, 4),
            "compression_ratio": round(self.compression_ratio, 3), "stats": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class Timing:
    """Wall seconds spent per stage for one file.

    Attributes:
        vad, encode, decode, align: stage totals.
        total: the whole transcribe_audio call.
    """

    vad: float = 0.0
    encode: float = 0.0
    decode: float = 0.0
    align: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class Transcript:
    """The result for one file.

    Attributes:
        path: the input as given ("-" for stdin).
        language: language used (given or detected); None when the file had no speech.
        language_probability: detection probability (1.0 when given).
        duration: seconds of audio.
        segments: absolute-time segments of the main task (the translation when task=translate).
        translation: English segments when task="both", else None.
        stats: SpecStats summed over every decode of the file.
        windows: per-window, per-task breakdown.
        timing: wall time per stage.
        task: the task asked for.
    """

    path: str
    language: str | None
    language_probability: float
    duration: float
    segments: tuple[Segment, ...]
    translation: tuple[Segment, ...] | None = None
    stats: SpecStats = field(default_factory=SpecStats)
    windows: tuple[WindowInfo, ...] = ()
    timing: Timing = field(default_factory=Timing)
    task: TaskChoice = "transcribe"

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()
