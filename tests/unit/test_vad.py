"""Silero VAD: streaming state, hysteresis, and gating of silence and noise (no events, no decodes)."""

import asyncio

import numpy as np
import pytest

from specscribe.pipeline.scheduler import ModelScheduler
from specscribe.pipeline.session import StreamSession
from specscribe.pipeline.types import StreamOptions
from specscribe.pipeline.vad import FRAME, SileroVad, VadOptions, shared_silero

SR = 16000


class ScriptedModel:
    """Returns scripted probabilities frame by frame; checks the frame layout."""

    def __init__(self, probs):
        self.probs = list(probs)

    def __call__(self, frames, h, c):
        assert frames.shape[1] == FRAME + 64
        n = frames.shape[0]
        out, self.probs = np.array(self.probs[:n], np.float32), self.probs[n:]
        return out, h, c


def test_hysteresis_start_and_end():
    # 0.1 s min_speech = 3 frames; 0.2 s min_silence = 6 frames; 0.4 between thresholds keeps speech
    probs = [0.1] * 5 + [0.9] * 2 + [0.1] + [0.9] * 10 + [0.4] * 3 + [0.9] * 2 + [0.1] * 5 + [0.4] * 3 + [0.1] * 4
    vad = SileroVad(VadOptions(threshold=0.5, min_speech=0.1, min_silence=0.2), model=ScriptedModel(probs))
    events = []
    audio = np.zeros(len(probs) * FRAME, np.float32)
    for i in range(0, audio.size, 700):  # chunks that do not line up with frames
        events += vad.process(audio[i : i + 700])
    assert [e.kind for e in events] == ["start", "end"]
    assert events[0].offset == 8 * FRAME  # the run of 0.9s after the lone 0.1
    assert events[1].offset == 23 * FRAME  # first frame below 0.35; the 0.4s after it count as silence


def test_silence_seconds_counts_the_open_silence_run():
    # speech, then 0.1s: the silence run grows while speech stays open, and is 0 once it has ended
    probs = [0.9] * 5 + [0.1] * 4 + [0.9] * 2 + [0.1] * 7
    vad = SileroVad(VadOptions(threshold=0.5, min_speech=0.1, min_silence=0.2), model=ScriptedModel(probs))
    seen = []
    for _ in probs:
        vad.process(np.zeros(FRAME, np.float32))
        seen.append(round(vad.silence_seconds / (FRAME / SR)))
    assert seen == [0] * 5 + [1, 2, 3, 4] + [0, 0] + [1, 2, 3, 4, 5] + [0, 0]  # 6 frames end it


def test_speech_frames_are_the_frames_at_or_above_threshold():
    probs = [0.1] * 3 + [0.9] * 4 + [0.4] * 2 + [0.6] * 3 + [0.1] * 2
    vad = SileroVad(VadOptions(threshold=0.5, min_speech=0.1, min_silence=0.2), model=ScriptedModel(probs))
    vad.process(np.zeros(len(probs) * FRAME, np.float32))
    expected = [i * FRAME for i, p in enumerate(probs) if p >= 0.5]
    assert vad.speech_frames(0, len(probs) * FRAME).tolist() == expected
    assert vad.speech_frames(5 * FRAME, 10 * FRAME).tolist() == [5 * FRAME, 6 * FRAME, 9 * FRAME]  # [start, end)
    assert vad.speech_seconds(0, len(probs) * FRAME) == pytest.approx(len(expected) * FRAME / SR)


def test_streaming_equals_one_shot():
    rng = np.random.default_rng(0)
    t = np.arange(4 * SR) / SR
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * (t > 1.5) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)
    model = shared_silero()
    one = SileroVad(model=model)
    one.process(audio)
    many = SileroVad(model=model)
    i = 0
    while i < audio.size:
        n = int(rng.integers(1, 3000))
        many.process(audio[i : i + n])
        i += n
    np.testing.assert_array_equal(one._h, many._h)
    assert one.last_prob == pytest.approx(many.last_prob, abs=1e-6)


def test_a_fork_hears_ahead_what_the_stream_will_hear_and_leaves_it_alone():
    probs = [0.1] * 3 + [0.9] * 8 + [0.1] * 10
    vad = SileroVad(VadOptions(threshold=0.5, min_speech=0.1, min_silence=0.2), model=ScriptedModel(probs))
    assert [e.kind for e in vad.process(np.zeros(6 * FRAME, np.float32))] == ["start"]
    fork = vad.fork()
    ahead = fork.process(np.zeros(15 * FRAME, np.float32))
    assert [e.kind for e in ahead] == ["end"] and fork.offset == 21 * FRAME
    assert vad.offset == 6 * FRAME and vad.in_speech  # the stream did not move
    vad._model = ScriptedModel(probs[6:])  # the same frames again, now for the stream itself
    assert vad.process(np.zeros(15 * FRAME, np.float32)) == ahead


class CountingTranscriber:
    name, model_name, is_multilingual = "count", "count", True

    def __init__(self):
        self.calls = 0

    def __getattr__(self, item):  # any model call counts
        def call(*args, **kwargs):
            self.calls += 1
            raise AssertionError(f"model called: {item}")

        return call


@pytest.mark.parametrize(
    "kind",
    ["silence", "white_noise", "pink_noise", "hum"],
)
def test_silence_and_noise_give_no_events_and_no_decodes(kind):
    rng = np.random.default_rng(1)
    n = 30 * SR
    if kind == "silence":
        audio = np.zeros(n, np.float32)
    elif kind == "white_noise":
        audio = 0.1 * rng.standard_normal(n)
    elif kind == "pink_noise":
        spec = np.fft.rfft(rng.standard_normal(n))
        spec /= np.sqrt(np.arange(1, spec.size + 1))
        audio = np.fft.irfft(spec, n)
        audio = 0.1 * audio / np.std(audio)
    else:
        t = np.arange(n) / SR
        audio = 0.2 * np.sin(2 * np.pi * 50 * t) + 0.05 * np.sin(2 * np.pi * 150 * t)
    audio = audio.astype(np.float32)

    async def main():
        tr = CountingTranscriber()
        scheduler = ModelScheduler(tr)
        session = StreamSession(scheduler, StreamOptions(), "s")
        events = []
        for i in range(0, n, 8000):
            session.insert_audio(audio[i : i + 8000])
            events += await session.process()
        events += await session.finish()
        await scheduler.close()
        return events, tr

    events, tr = asyncio.run(main())
    assert tr.calls == 0
    assert [e.type for e in events] == ["stats"]
    assert events[0].stats["updates"] == 0
