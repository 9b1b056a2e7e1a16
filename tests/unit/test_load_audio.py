"""pipeline/audio.py load_audio with real PyAV: channel counts swresample cannot downmix, the
layouts it can (unchanged), and streams of 0 samples next to corrupt ones."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from wavs import write_wav

from specscribe.pipeline.audio import SAMPLE_RATE, AudioError, load_audio

av = pytest.importorskip("av")


def tone(n: int, rate: int = SAMPLE_RATE, amplitude: float = 12000.0) -> np.ndarray:
    t = np.arange(n) / rate
    return (amplitude * np.sin(2 * np.pi * 440 * t) + 0.3 * amplitude * np.sin(2 * np.pi * 97 * t)).astype(np.int16)


def swresample_mono(path: Path) -> np.ndarray:
    """load_audio's decode as it was before channels were ever averaged: swresample's own downmix."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    parts = []
    with av.open(str(path), metadata_errors="ignore") as container:
        for frame in container.decode(audio=0):
            parts += [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
        parts += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    return (np.concatenate(parts).astype(np.float32) / 32768.0).astype(np.float32)


@pytest.mark.parametrize("channels", [9, 11, 17, 25, 32])
def test_channel_counts_without_a_standard_layout_are_averaged(tmp_path, channels):
    mono = tone(SAMPLE_RATE)
    same = load_audio(write_wav(tmp_path / "same.wav", np.repeat(mono[:, None], channels, axis=1)))
    assert np.array_equal(same, load_audio(write_wav(tmp_path / "mono.wav", mono)))  # exactly the mono file

    gains = np.linspace(0.1, 1.0, channels)
    pcm = np.round(mono[:, None] * gains).astype(np.int16)
    audio = load_audio(write_wav(tmp_path / "mixed.wav", pcm))
    assert audio.dtype == np.float32 and audio.shape == (SAMPLE_RATE,)
    assert np.abs(audio - pcm.mean(axis=1) / 32768.0).max() <= 1 / 32768  # the channels' mean


def test_nine_channels_at_another_rate_are_averaged_then_resampled(tmp_path):
    rate = 44_100
    mono = tone(rate, rate)
    audio = load_audio(write_wav(tmp_path / "nine.wav", np.repeat(mono[:, None], 9, axis=1), rate))
    reference = load_audio(write_wav(tmp_path / "mono.wav", mono, rate))
    assert audio.shape == reference.shape == (SAMPLE_RATE,)
    assert np.abs(audio - reference).max() < 2e-3  # the same resampler, fed float instead of s16


def test_a_planar_stream_of_more_than_eight_channels_is_averaged(tmp_path):
    # PyAV's to_ndarray reads past the end of such a frame (a crash): it goes through swresample first
    from fractions import Fraction

    mono = tone(SAMPLE_RATE)
    pcm = np.round(mono[None, :] * np.linspace(0.1, 1.0, 9)[:, None]).astype("<i2")  # (9, n)
    path = tmp_path / "planar.nut"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le_planar", rate=SAMPLE_RATE)
        stream.codec_context.layout, stream.codec_context.format = "9 channels", "s16p"
        stream.time_base = Fraction(1, SAMPLE_RATE)
        for i in range(0, pcm.shape[1], 1600):
            packet = av.Packet(pcm[:, i : i + 1600].tobytes())
            packet.stream, packet.pts, packet.dts, packet.time_base = stream, i, i, stream.time_base
            container.mux(packet)
    with av.open(str(path)) as container:
        frame = next(container.decode(audio=0))
        assert frame.format.name == "s16p" and len(frame.layout.channels) == 9
    audio = load_audio(path)
    assert audio.shape == (SAMPLE_RATE,)
    assert np.abs(audio - pcm.mean(axis=0) / 32768.0).max() <= 1 / 32768


@pytest.mark.parametrize("channels, rate", [(1, 16_000), (2, 44_100), (3, 22_050), (6, 48_000), (8, 16_000)])
def test_layouts_swresample_downmixes_give_the_samples_they_always_gave(tmp_path, channels, rate):
    rng = np.random.default_rng(channels)
    pcm = np.round(tone(rate // 2, rate)[:, None] * rng.uniform(0.2, 1.0, channels)).astype(np.int16)
    path = write_wav(tmp_path / f"{channels}.wav", pcm, rate)
    assert np.array_equal(load_audio(path), swresample_mono(path))


def test_stereo_flac_gives_the_samples_it_always_gave(tmp_path):
    rng = np.random.default_rng(0)
    pcm = np.stack([tone(48_000, 48_000), rng.integers(-3000, 3000, 48_000).astype(np.int16)])  # (2, n)
    path = tmp_path / "stereo.flac"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("flac", rate=48_000, layout="stereo")
        for i in range(0, pcm.shape[1], 4800):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm[:, i : i + 4800].T.reshape(1, -1)),
                                               format="s16", layout="stereo")
            frame.sample_rate, frame.pts = 48_000, i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    audio = load_audio(path)
    assert audio.shape == (SAMPLE_RATE,) and np.array_equal(audio, swresample_mono(path))


def test_a_wav_of_zero_frames_is_empty_audio_not_an_error(tmp_path):
    path = write_wav(tmp_path / "zero.wav", np.zeros(0, np.int16))
    audio = load_audio(path)
    assert audio.dtype == np.float32 and audio.shape == (0,)
    assert load_audio(path.read_bytes()).shape == (0,)  # stdin and uploads too
    assert load_audio(write_wav(tmp_path / "zero9.wav", np.zeros((0, 9), np.int16))).shape == (0,)


def test_what_does_not_decode_stays_an_error(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AudioError, match="empty file"):
        load_audio(tmp_path / "empty.wav")
    flac = io.BytesIO()
    with av.open(flac, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=SAMPLE_RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(tone(SAMPLE_RATE)[None, :], format="s16", layout="mono")
        frame.sample_rate, frame.pts = SAMPLE_RATE, 0
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    noise = np.random.default_rng(0).integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    header = flac.getvalue()[:42]  # "fLaC", then STREAMINFO, which promises a second of audio
    corrupt = tmp_path / "corrupt.flac"  # STREAMINFO marked the last metadata block, then noise
    corrupt.write_bytes(header[:4] + bytes([header[4] | 0x80]) + header[5:] + noise)
    with pytest.raises(AudioError, match="no audio samples decoded"):
        load_audio(corrupt)
    with pytest.raises(AudioError, match="no audio samples decoded"):
        load_audio(corrupt.read_bytes())


def test_a_file_of_zero_frames_gets_empty_outputs_as_one_of_one_sample_does(tmp_path):
    from specscribe.pipeline.batch import BatchOptions, _FileRun
    from specscribe.pipeline.inputs import collect_inputs

    class NoDecodes:  # no speech, no windows: the transcriber is never asked for anything
        def decode_loop(self):
            return self

        def step(self):
            raise AssertionError("nothing to decode")

    (tmp_path / "in").mkdir()
    write_wav(tmp_path / "in" / "zero.wav", np.zeros(0, np.int16))
    write_wav(tmp_path / "in" / "one.wav", np.zeros(1, np.int16))
    items, _ = collect_inputs([str(tmp_path / "in")])
    out, reports = tmp_path / "out", []
    run = _FileRun(NoDecodes(), BatchOptions(output_dir=out, formats=("txt", "json")), None,
                   lambda item, transcript, reason: reports.append((item.stem, transcript is not None, reason)))
    run.run(items, [0.0, 0.0])
    assert reports == [(Path("one"), True, ""), (Path("zero"), True, "")]
    assert (out / "zero.txt").read_text() == (out / "one.txt").read_text() == ""
    for stem in ("zero", "one"):
        doc = json.loads((out / f"{stem}.json").read_text())
        assert doc["segments"] == [] and doc["text"] == ""
