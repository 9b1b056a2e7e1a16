"""How many mel frames the encoder gets for a window (pipeline.audio.encoder_frames)."""

from specscribe.pipeline.audio import N_FRAMES, encoder_frames
from specscribe.pipeline.stream_jobs import encoder_window

import numpy as np


def test_encoder_frames_round_up_to_whole_seconds_and_cap_at_30():
    assert encoder_frames(None) == N_FRAMES == 3000
    assert encoder_frames(30.0) == encoder_frames(45.0) == 3000
    assert encoder_frames(7.2) == 800
    assert encoder_frames(0.3) == 200  # at least 2 s


def test_streaming_window_is_audio_plus_pad():
    audio = np.zeros(16000 * 6, np.float32)
    assert encoder_window(audio, 5.0) == 11.0
    assert encoder_window(audio, 30.0) is None
    assert encoder_window(np.zeros(16000 * 26, np.float32), 5.0) is None


def test_encoder_frames_never_cut_the_audio():
    assert encoder_frames(3.0, audio_seconds=7.5) == 800
    assert encoder_frames(3.0, audio_seconds=31.0) == 3000
    assert encoder_frames(None, audio_seconds=4.0) == 3000
