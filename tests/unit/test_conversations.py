"""The conversational evaluation set (specscribe/conversations.py): timeline, conditions, manifest,
determinism, with harmonic tone bursts instead of speech; one real espeak-ng build when installed."""

from __future__ import annotations

import json
import shutil
import wave
import zlib

import numpy as np
import pytest

from specscribe import conversations as conv
from specscribe.dialogues import DIALOGUES
from specscribe.models.distill.synth import Speech

SR = 16_000
SPEAKERS = (conv.Speaker("A", "en-us+m3", 160, 40), conv.Speaker("B", "en-gb+f3", 160, 60, piper=True))
SCRIPT = """
    A: Hello there, is this the right number?
    B: Yeah.
    A: Good, I wanted to ask about the delivery on Monday.
    ~B: Right.
    B: It should arrive before noon.
    ...A: Okay, and is there a tracking number?
    B: Sure, it is in the email.
    ~A: Mm-hm.
    A: Thanks, bye.
"""


class FakeVoices:
    """A harmonic tone (f0 by speaker, harmonics up to 7 kHz) whose length follows the text."""

    def __init__(self, scale: float = 0.3) -> None:
        self.calls, self.scale = 0, scale

    def __call__(self, speaker: conv.Speaker, text: str) -> Speech:
        self.calls += 1
        n = int((0.25 + 0.06 * len(text)) * SR)
        f0 = 110 + 40 * (zlib.crc32(speaker.name.encode()) % 4)
        t = np.arange(n) / SR
        tone = sum(np.sin(2 * np.pi * k * f0 * t) / k for k in range(1, int(7000 / f0)))
        ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.01)  # 10 ms fades
        return Speech((self.scale * tone * ramp).astype(np.float32), f"fake:{speaker.name}")


def _dialogue(condition: conv.Condition = conv.CLEAN, name: str = "test") -> conv.Dialogue:
    return conv.Dialogue(name, condition, SPEAKERS, SCRIPT)


def _band_fraction(audio: np.ndarray, low: float, high: float) -> float:
    power = np.abs(np.fft.rfft(audio.astype(np.float64))) ** 2
    f = np.fft.rfftfreq(audio.size, 1 / SR)
    return float(power[(f < low) | (f > high)].sum() / power.sum())


def test_turns_follow_the_script_with_configured_gaps_overlaps_and_pauses():
    opts = conv.MixOptions()
    mix = conv.mix_dialogue(_dialogue(), FakeVoices(), opts)
    script = _dialogue().turns
    assert [t.text for t in mix.turns] == [t.text for t in script]
    assert mix.turns[0].start == pytest.approx(opts.lead, abs=1e-3)
    assert mix.duration == pytest.approx(max(t.end for t in mix.turns) + opts.tail, abs=2e-3)
    kinds = set()
    for prev, turn, planned in zip(mix.turns, mix.turns[1:], script[1:]):
        gap = turn.start - prev.end
        assert turn.start > prev.start and turn.end > prev.end
        if planned.overlap:
            assert turn.overlap
            shortest = min(prev.end - prev.start, turn.end - turn.start)
            assert -opts.overlap[1] - 2e-3 <= gap <= -min(opts.overlap[0], 0.5 * shortest) + 2e-3
            kinds.add("overlap")
        elif planned.pause:
            assert opts.pause[0] - 2e-3 <= gap <= opts.pause[1] + 2e-3
            kinds.add("pause")
        else:
            assert not turn.overlap
            assert opts.gap[0] - 2e-3 <= gap <= opts.gap[1] + 2e-3
            kinds.add("gap")
    assert kinds == {"overlap", "pause", "gap"}


def test_manifest_times_match_where_the_energy_is():
    mix = conv.mix_dialogue(_dialogue(), FakeVoices(), conv.MixOptions())
    frame = SR // 100  # 10 ms
    rms = np.sqrt(np.mean(mix.audio[: mix.audio.size // frame * frame].reshape(-1, frame) ** 2, axis=1))
    centre = (np.arange(rms.size) + 0.5) / 100
    inside = np.zeros(rms.size, bool)
    near = np.zeros(rms.size, bool)
    for t in mix.turns:
        inside |= (centre > t.start + 0.02) & (centre < t.end - 0.02)
        near |= (centre > t.start - 0.02) & (centre < t.end + 0.02)
    assert inside.sum() > 100
    assert rms[inside].min() > 0.01  # speech wherever the manifest says
    assert rms[~near].max() < 1e-4  # silence everywhere else (clean condition)


def test_phone_condition_keeps_only_the_telephone_band():
    clean = conv.mix_dialogue(_dialogue(), FakeVoices(), conv.MixOptions())
    phone = conv.mix_dialogue(_dialogue(conv.PHONE), FakeVoices(), conv.MixOptions())
    assert phone.audio.size == clean.audio.size
    assert _band_fraction(clean.audio, 250, 3600) > 0.2  # the fake voice has energy there to remove
    assert _band_fraction(phone.audio, 250, 3600) < 1e-4
    corr = np.corrcoef(band_limited := conv.band_pass(clean.audio, SR, 300, 3400), phone.audio)[0, 1]
    assert corr > 0.95 and band_limited.std() > 0  # still the same speech, through the phone


@pytest.mark.parametrize("snr", [10.0, 15.0])
def test_noisy_condition_has_the_target_snr(snr):
    opts = conv.MixOptions()
    clean = conv.mix_dialogue(_dialogue(), FakeVoices(), opts)
    noisy = conv.mix_dialogue(_dialogue(), FakeVoices(), opts, conv.Condition("noisy", snr))
    c, n = clean.audio.astype(np.float64), noisy.audio.astype(np.float64)
    gain = float(c @ n / (c @ c))  # the limiter may have scaled either mix
    noise = n - gain * c
    measured = 10 * np.log10(conv.speech_power(gain * c, clean.turns, SR) / np.mean(noise**2))
    assert measured == pytest.approx(snr, abs=0.5)
    assert np.abs(noise[: SR // 4]).max() > 0  # noise in the lead-in silence too


@pytest.mark.parametrize("condition", [conv.CLEAN, conv.NOISY, conv.PHONE, conv.PHONE_NOISY])
def test_loud_mixes_are_peak_limited_never_clipped(tmp_path, condition):
    opts = conv.MixOptions(level_db=-3.0)  # speakers near full scale, overlaps add up past it
    mix = conv.mix_dialogue(_dialogue(condition), FakeVoices(scale=1.0), opts)
    peak = float(np.abs(mix.audio).max())
    assert opts.peak * 0.9 < peak <= opts.peak + 1e-6
    conv.write_wav(tmp_path / "x.wav", mix.audio, SR)
    with wave.open(str(tmp_path / "x.wav")) as wf:
        pcm = np.frombuffer(wf.readframes(wf.getnframes()), "<i2")
    assert pcm.size == mix.audio.size and np.abs(pcm.astype(np.int32)).max() < 32767


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    dialogues = (_dialogue(conv.PHONE_NOISY),)
    paths = [
        conv.build_conversations(tmp_path / d, lambda m: None, dialogues, conv.MixOptions(seed=s), FakeVoices(), "fake")
        for d, s in (("a", 1), ("b", 1), ("c", 2))
    ]
    data = [p["test-phone-noisy"].read_bytes() for p in paths]
    assert data[0] == data[1] and data[0] != data[2]
    manifests = [p["test-phone-noisy"].with_suffix(".json").read_text() for p in paths]
    assert manifests[0] == manifests[1]


def test_build_writes_manifest_and_is_idempotent(tmp_path):
    voices, logs = FakeVoices(), []
    dialogues = (_dialogue(conv.NOISY, "talk"),)
    built = conv.build_conversations(tmp_path, logs.append, dialogues, conv.MixOptions(), voices, "fake")
    wav = tmp_path / "conversations" / "talk-noisy.wav"
    assert built == {"talk-noisy": wav}
    m = json.loads(wav.with_suffix(".json").read_text())
    with wave.open(str(wav)) as wf:
        assert (wf.getframerate(), wf.getnchannels(), wf.getsampwidth()) == (SR, 1, 2)
        assert m["duration"] == pytest.approx(wf.getnframes() / SR, abs=1e-3)
    assert m["condition"] == "noisy" and m["snr_db"] == 15.0 and m["voices"] == {"A": "fake:A", "B": "fake:B"}
    assert [t["speaker"] for t in m["turns"]] == [t.speaker for t in dialogues[0].turns]
    assert all(0 <= t["start"] < t["end"] <= m["duration"] for t in m["turns"])
    assert m["reference"].startswith("Hello there, is this the right number? Yeah. Good,")
    calls, stamp = voices.calls, wav.stat().st_mtime_ns
    assert conv.build_conversations(tmp_path, logs.append, dialogues, conv.MixOptions(), voices, "fake") == built
    assert voices.calls == calls and wav.stat().st_mtime_ns == stamp  # kept, not rebuilt
    conv.build_conversations(tmp_path, logs.append, dialogues, conv.MixOptions(seed=3), voices, "fake")
    assert voices.calls > calls  # other options: another version, rebuilt
    assert conv.conversation_clips(tmp_path) == {"talk-noisy": (wav, dialogues[0].reference)}


def test_the_shipped_dialogues():
    assert len(DIALOGUES) == 4
    assert {d.condition.name for d in DIALOGUES} >= {"clean", "noisy", "phone"}
    assert len({d.clip_name for d in DIALOGUES}) == 4
    backchannels = {"yeah", "right", "okay", "mm-hm", "sure", "true"}
    for d in DIALOGUES:
        names = [s.name for s in d.speakers]
        assert sum(s.piper for s in d.speakers) == 1
        assert len({(s.voice, s.speed, s.pitch) for s in d.speakers}) == len(d.speakers) >= 2
        turns = d.turns
        assert {t.speaker for t in turns} == set(names) and 15 <= len(turns) <= 30
        assert all(1 <= len(t.text.split()) <= 12 for t in turns), d.name
        assert sum(t.overlap for t in turns) >= 2 and sum(t.pause for t in turns) >= 1
        assert any(t.text.lower().strip(".,!?") in backchannels for t in turns)


def test_cli_has_the_conversations_action():
    from specscribe.cli import build_parser

    args = build_parser().parse_args(["clips", "conversations"])
    assert args.action == "conversations" and callable(args.func)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_one_real_dialogue_with_espeak(tmp_path):
    dialogue = conv.Dialogue("espeak", conv.PHONE, SPEAKERS, """
        A: Hello, can you hear me?
        ~B: Yeah.
        A: Great, see you at three.""")
    voices = conv.TtsVoices(use_piper=False)
    built = conv.build_conversations(tmp_path, lambda m: None, (dialogue,), conv.MixOptions(), voices, voices.backends)
    wav = built["espeak-phone"]
    m = json.loads(wav.with_suffix(".json").read_text())
    assert wav.stat().st_size > 44 and m["voices"] == {"A": "espeak:en-us+m3 s=160 p=40", "B": "espeak:en-gb+f3 s=160 p=60"}
    assert 2.0 < m["duration"] < 12.0
    for t in m["turns"]:
        words = len(t["text"].split())
        assert 0.12 * words < t["end"] - t["start"] < 1.0 * words + 0.5
    with wave.open(str(wav)) as wf:
        assert wf.getnframes() / SR == pytest.approx(m["duration"], abs=1e-3)
