"""Value types of the streaming pipeline. Times are seconds of audio from the stream's start,
except `emitted_at`, which is wall-clock seconds since the stream started."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specscribe.models.types import Segment, SpecStats, Task, Word
from specscribe.pipeline.lines import LineOptions

__all__ = ["CaptionEvent", "EventType", "Segment", "SpecStats", "StreamOptions", "Word"]

EventType = Literal["partial", "final", "translation", "speech_start", "speech_end", "stats", "language", "line"]


@dataclass(frozen=True)
class CaptionEvent:
    """One thing a stream tells its listeners.

    Attributes:
        type: partial | final | translation | speech_start | speech_end | stats | language | line.
        emitted_at: wall-clock seconds since the stream started.
        id: for final, its number in the stream (0, 1, ...); for translation, the id of the final it translates;
            for line, the id of the line's last final (a caption line: pipeline/lines.py).
        start, end: seconds of audio (partial, final, translation, speech_start/end).
        text: the caption text.
        words: word timings of a final.
        stats: for stats events, counters (SpecStats.to_dict() plus stream figures).
        alternatives: for a final, the n-best texts of its span, its own first (StreamOptions.n_best).
        language: for a final, the language it was decoded in (a line: its finals'); for a language event, the stream's.
        probability, locked: for a language event, the tracker's confidence and whether it locked
            (pipeline/language.py).
    """

    type: EventType
    emitted_at: float
    id: int | None = None
    start: float | None = None
    end: float | None = None
    text: str = ""
    words: tuple[Word, ...] = ()
    stats: dict[str, Any] | None = None
    alternatives: tuple[str, ...] = ()
    language: str | None = None
    probability: float | None = None
    locked: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "emitted_at": round(self.emitted_at, 3)}
        if self.id is not None:
            out["id"] = self.id
        if self.start is not None:
            out["start"] = round(self.start, 3)
        if self.end is not None:
            out["end"] = round(self.end, 3)
        if self.type in ("partial", "final", "translation", "line"):
            out["text"] = self.text
        if self.type == "final":
            out["words"] = [
                {"start": round(w.start, 3), "end": round(w.end, 3), "text": w.text, "probability": round(w.probability, 3)}
                for w in self.words
            ]
        if self.alternatives:
            out["alternatives"] = [{"text": t} for t in self.alternatives]
        if self.type in ("final", "language", "line") and self.language is not None:
            out["language"] = self.language
        if self.type == "language":
            out.update(probability=round(self.probability or 0.0, 4), locked=bool(self.locked))
        if self.stats is not None:
            out["stats"] = self.stats
        return out


@dataclass(frozen=True)
class StreamOptions:
    """Options of one streaming session.

    Attributes:
        language: ISO code, or None to detect it (pipeline/language.py: locked once several seconds
            of speech agree, re-checked at each utterance).
        languages: codes detection may choose among (empty: any), e.g. ("en", "de").
        task: "transcribe" or "translate" for the main captions.
        translate: also emit an English `translation` event for each final.
        interim_results: emit `partial` events.
        update_interval: seconds of new audio between decode updates.
        agree_gap: seconds of audio between two hypotheses that agree on a word before it is final
            (pipeline/policy.py; 0: successive updates, however close).
        max_buffer: seconds of uncommitted audio kept at most (a Whisper window is 30 s).
        vad_threshold: Silero speech probability above which a frame is speech.
        min_silence: seconds of silence that end an utterance (speech_end, flush).
        draft: use the previous hypothesis (then the draft decoder) as drafts.
        min_speech: seconds of VAD speech before an utterance starts (filters clicks).
        speech_pad: seconds of audio kept before a speech start and after a speech end.
        trim_after: uncommitted seconds past which the buffer is cut at the last committed word
            (it is always cut at committed sentence ends that leave keep_context seconds).
        keep_context: seconds of committed audio the buffer keeps before the uncommitted words when it
            is cut at a sentence end: Whisper hears short turns better with the turns before them.
        vad: gate decoding with the VAD; False decodes all audio (for tests and benchmarks).
        encoder_pad: seconds of padding after the audio in the encoder's input: each update
            encodes buffer + pad instead of Whisper's full 30 s window (several times cheaper for
            short buffers; under ~2 s Whisper starts repeating itself). 30 or more: the full window,
            as batch transcription does (slower, the batch transcript's exact setting).
        loaded_encoder_pad: under load (level 2 and up, pipeline/load.py) decodes get at most this much
            padding: a cheaper encode for every session while the model cannot keep up; None: encoder_pad
            at every level.
        beam_size: beam search width of the decodes (1: greedy; beams are rows of one pass, no drafts).
        n_best: `final` events carry up to this many alternative texts (1: none); <= beam_size.
        hotwords: words to favour (faster-whisper's hotwords: a prompt after <|startofprev|>).
        hold_unsure: at a pause (a speech end), words the model is unsure of stay partial until the
            speech after the pause confirms or corrects them, or the pause lasts 2 s (session.py
            CONTEXT_GAP); False commits an utterance's whole last hypothesis at its end.
        pause_probability: at a pause, the probability the utterance's last word needs to be committed
            rather than held (it heard no speech after it; the words before it need 0.5; pipeline/policy.py).
        pause_commit: seconds of VAD silence after speech at which the hypothesis is committed up to
            its first unsure word, as at an utterance end but before the `min_silence` that ends it
            (None: wait for the end).
        lines: where finals are grouped into caption lines (`line` events).
        settle_after: a word of the newest hypothesis that ends this many seconds before the audio's end is
            final even if the hypotheses before it disagree on it (pipeline/policy.py); None: never.
        own_load: this stream's updates come further apart, as under load (pipeline/load.py), when its own
            decodes take long, even alone on the model (a CPU too slow for the model); False: only when the
            scheduler is busy. Only the interval: kept context and held words follow the scheduler's load.
            The stream's own meter starts afresh with an utterance after a long pause (its decodes are short
            again: no context before it).
        continue_skipped: a decode that skipped speech the VAD heard (stopped early, or jumped over it)
            has the audio from there decoded again on its own (pipeline/stream_jobs.py stopped_at).
        detect_apart: with language None, an utterance's decodes that run the language detector keep the
            context before the utterance (as with a given language), and the detector hears the utterance
            alone, in an encoder pass of its own; False: those decodes hear the utterance alone too.
        retry_loops: a decode that loops (Whisper repeating a phrase; the compression-ratio guard) is decoded
            again with timestamp tokens, which break most loops, and if that loops too, without its prompt;
            False: its text is dropped.
        speech_onsets: a word that DTW started in the pause before it (often a turn's first word, in the
            previous word's tail) starts where the VAD hears speech inside it (pipeline/stream_jobs.py
            speech_onsets): caption and SRT times, and translation spans, which end where the next word starts.
    """

    language: str | None = None
    languages: tuple[str, ...] = ()
    task: Task = "transcribe"
    translate: bool = False
    interim_results: bool = True
    update_interval: float = 0.5
    agree_gap: float = 0.0
    max_buffer: float = 25.0
    vad_threshold: float = 0.5
    min_silence: float = 0.6
    draft: bool = True
    min_speech: float = 0.1
    speech_pad: float = 0.3
    trim_after: float = 12.0
    keep_context: float = 8.0
    vad: bool = True
    encoder_pad: float = 5.0
    loaded_encoder_pad: float | None = 2.0
    hold_unsure: bool = True
    pause_probability: float = 0.8
    beam_size: int = 1
    n_best: int = 1
    hotwords: str = ""
    pause_commit: float | None = None
    lines: LineOptions = LineOptions()
    continue_skipped: bool = True
    detect_apart: bool = True
    retry_loops: bool = True
    speech_onsets: bool = True
    settle_after: float | None = 4.0
    own_load: bool = True
