"""Audio constants and decoding: one place for sample rate, window length and frame sizes.

Every other module derives its sizes from these. Times are in seconds (float) everywhere
outside this module; sample offsets are ints at SAMPLE_RATE.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import BinaryIO

import numpy as np


def _exact_div(x: int, y: int) -> int:
    assert x % y == 0, (x, y)
    return x // y


SAMPLE_RATE = 16_000  # Hz, what Whisper was trained on
N_FFT = 400
HOP_LENGTH = 160  # samples between mel frames (10 ms)
CHUNK_LENGTH = 30  # seconds in one Whisper window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480_000 samples in a window
N_FRAMES = _exact_div(N_SAMPLES, HOP_LENGTH)  # 3000 mel frames in a window
N_SAMPLES_PER_TOKEN = HOP_LENGTH * 2  # the encoder's conv2 has stride 2
FRAMES_PER_SECOND = _exact_div(SAMPLE_RATE, HOP_LENGTH)  # 100
TOKENS_PER_SECOND = _exact_div(SAMPLE_RATE, N_SAMPLES_PER_TOKEN)  # 50 encoder positions a second
TIME_PRECISION = 1 / TOKENS_PER_SECOND  # 0.02 s per timestamp token


def encoder_frames(window: float | None, audio_seconds: float = 0.0) -> int:
    """Mel frames of encoder input for a window of `window` seconds, never shorter than the audio
    (None: Whisper's full 30 s).

    A shorter encoder input (the audio plus some padding, instead of 30 s) costs proportionally
    less encoder and cross-attention time. Whisper was trained on 30 s windows only, so the text
    can differ a little, and with under ~2 s of padding after the speech it starts to repeat
    itself; streaming uses the audio + StreamOptions.encoder_pad. Whole seconds, at least 2 s.
    """
    if window is None:
        return N_FRAMES
    window = max(window, audio_seconds)
    return N_FRAMES if window >= CHUNK_LENGTH else max(2, math.ceil(window)) * FRAMES_PER_SECOND


class AudioError(Exception):
    """An input that cannot be read as audio. The message names the reason; callers add the file."""


class AudioTooLong(AudioError):
    """The audio runs past load_audio's max_seconds (decoding stopped there)."""


def load_audio(source: str | Path | bytes | BinaryIO, max_seconds: float | None = None) -> np.ndarray:
    """Decode any file PyAV can read (wav, flac, mp3, m4a, ogg, opus, a video's audio track).

    Returns float32 mono samples at SAMPLE_RATE, shape (n_samples,).
    Raises AudioError with a one-line reason for missing, empty, corrupt or non-audio input, and
    AudioTooLong (an AudioError) as soon as more than max_seconds have decoded (None: no limit).
    """
    import av  # imported here: PyAV is slow to import and only file paths need it

    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise AudioError("no such file")
        if path.is_dir():
            raise AudioError("is a directory")
        if path.stat().st_size == 0:
            raise AudioError("empty file (0 bytes)")
        stream: str | BinaryIO = str(path)
    elif isinstance(source, bytes):
        if not source:
            raise AudioError("empty input (0 bytes)")
        stream = io.BytesIO(source)
    else:
        stream = source

    try:
        with av.open(stream, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioError("no audio stream (not an audio or video file?)")
            resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
            parts: list[np.ndarray] = []
            kept, max_samples = 0, None if max_seconds is None else int(max_seconds * SAMPLE_RATE)
            decoded, unpack = 0, None
            for frame in container.decode(audio=0):
                decoded += 1
                if unpack is None:
                    try:
                        outs = resampler.resample(frame)
                    except av.error.ArgumentError:
                        # swresample has no downmix for a channel count without a standard layout
                        # (9, 11, 13, 15, 17-23, 25 or more channels): average the channels here
                        if decoded > 1:
                            raise
                        unpack = av.AudioResampler(format="flt", layout=frame.layout, rate=frame.sample_rate)
                        resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
                if unpack is not None:
                    outs = [out for mono in _channel_mean(frame, unpack, av) for out in resampler.resample(mono)]
                for out in outs:
                    parts.append(out.to_ndarray().reshape(-1))
                    kept += parts[-1].size
                if max_samples is not None and kept > max_samples:  # stop here, not after decoding it all
                    raise AudioTooLong(f"longer than {max_seconds:g} s")
            if unpack is not None:
                for mono in _channel_mean(None, unpack, av):
                    parts += [out.to_ndarray().reshape(-1) for out in resampler.resample(mono)]
            for out in resampler.resample(None):  # flush
                parts.append(out.to_ndarray().reshape(-1))
            declared = container.duration or 0  # from the header; None where it gives none
    except AudioError:
        raise
    except av.error.InvalidDataError as exc:
        raise AudioError(f"not a readable audio file ({exc.strerror or 'invalid data'})") from None
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise AudioError(f"cannot decode audio ({type(exc).__name__}: {exc})") from None

    if not parts:
        if not decoded and declared > 0:  # the header promises audio, and none of it decodes
            raise AudioError("no audio samples decoded (empty or corrupt stream)")
        return np.zeros(0, dtype=np.float32)  # a valid stream of 0 samples: an empty transcript
    pcm = np.concatenate(parts)
    if max_samples is not None and pcm.size > max_samples:  # the resampler's flush went past it
        raise AudioTooLong(f"longer than {max_seconds:g} s")
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def _channel_mean(frame, unpack, av) -> list:
    """Mono float frames, each the mean of the channels of a frame out of `unpack` (None: flush).

    `unpack` turns `frame` into interleaved float at its own rate and channels (no downmix needed),
    as PyAV's to_ndarray reads past the end of a planar frame with more than 8 channels.
    """
    out = []
    for packed in unpack.resample(frame):
        x = packed.to_ndarray().reshape(-1, len(packed.layout.channels))  # (n, channels)
        mono = x.mean(axis=1, dtype=np.float64).astype(np.float32)[None, :]
        out.append(av.AudioFrame.from_ndarray(mono, format="flt", layout="mono"))
        out[-1].sample_rate = packed.sample_rate
    return out


def pcm16_to_float(data: bytes) -> np.ndarray:
    """Little-endian signed 16-bit PCM bytes -> float32 in [-1, 1), shape (n,)."""
    if len(data) % 2:
        raise AudioError("odd number of bytes for 16-bit PCM")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def clean_samples(samples: np.ndarray) -> np.ndarray:
    """Mono float32 samples, shape (n,), non-finite values clamped (in place where already float32)."""
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"audio must be 1-D mono samples, got shape {x.shape}")
    return np.nan_to_num(x, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
