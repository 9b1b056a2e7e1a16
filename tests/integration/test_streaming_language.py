"""Streaming language detection on the real base model (pipeline/language.py): the language is not fixed on a
short first guess, a stream that switches language is followed, and the allow-list holds.

Clips: multilingual.mp3 (English, then German from 30 s), jfk (English) and espeak-ng speech in French, Spanish
and Italian (synthesized here: espeak-ng is one of make test's system packages; its Mandarin voice is not
intelligible to Whisper base, so no Mandarin). Every stream runs through
StreamSession and the shared scheduler at the default compute type, fed as fast as the model goes.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(base_model_dir):
    from specscribe.models.engines import EngineOptions, load_transcriber

    return load_transcriber(EngineOptions(engine="spec", model="base"))


def stream(engine, audio: np.ndarray, **options) -> list:
    from specscribe.pipeline.scheduler import ModelScheduler
    from specscribe.pipeline.session import StreamSession
    from specscribe.pipeline.types import StreamOptions

    async def main():
        scheduler = ModelScheduler(engine)
        # updates every 1 s of speech (not 0.5): half the model time, the same language evidence
        session = StreamSession(scheduler, StreamOptions(language=None, update_interval=1.0, **options), "lang")
        events = []
        step = 8000  # 0.5 s
        for i in range(0, len(audio), step):
            session.insert_audio(audio[i : i + step])
            events += await session.process()
        events += await session.finish()
        await scheduler.close()
        return events

    return asyncio.run(main())


def said(events) -> list[tuple[str, bool]]:
    return [(e.language, e.locked) for e in events if e.type == "language"]


def espeak(text: str, voice: str, folder: Path) -> np.ndarray:
    from specscribe.pipeline.audio import load_audio

    wav = folder / f"{voice}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(wav), text], check=True, capture_output=True)
    return load_audio(wav)


def test_a_stream_that_switches_from_english_to_german_is_followed(engine, clips_dir):
    from specscribe.clips import GERMAN_START
    from specscribe.pipeline.audio import load_audio

    cut = 16.0  # 14 s of English, then 16 s of German
    audio = load_audio(clips_dir / "multilingual.mp3")[int(cut * 16000) : int((GERMAN_START + 16) * 16000)]
    events = stream(engine, audio)
    locks = [lang for lang, locked in said(events) if locked]
    assert locks[0] == "en" and locks[-1] == "de", said(events)
    finals = [e for e in events if e.type == "final"]
    assert {f.language for f in finals if f.end < GERMAN_START - cut - 2} == {"en"}
    german = [f for f in finals if f.start > GERMAN_START - cut + 4]
    assert german and {f.language for f in german} == {"de"}
    assert "Software" in " ".join(f.text for f in german)
    # after the switch no German is heard as English words (the English text as the prompt, or the English
    # speech as context, made base write "access-rich documentation data" and skip 7 s), and none is skipped
    # (the first German word's start may lie in the pause before it: DTW over a window with the English context
    # stretches it back to the last English word, as with any word after a pause)
    after = [f for f in finals if f.language == "de" or f.start > GERMAN_START - cut - 1]
    words = [w.strip(".,?!").lower() for f in after for w in f.text.split()]
    assert not set(words) & {"the", "and", "of", "who", "data", "where"}, [f.text for f in after]
    gaps = [b.start - a.end for a, b in zip(after, after[1:])]
    assert after[0].start < GERMAN_START - cut + 1.5 and max(gaps) < 3.0, [(f.start, f.end, f.text) for f in after]
    assert "software" in words[:5], [f.text for f in after]  # "Jeden, der diese Software ...": its start not skipped


def test_english_speech_locks_english_and_never_guesses_another_language_for_good(engine, clips_dir):
    from specscribe.pipeline.audio import load_audio

    events = stream(engine, load_audio(clips_dir / "jfk.flac"))
    assert [lang for lang, locked in said(events) if locked] == ["en"]
    assert {e.language for e in events if e.type == "final"} == {"en"}


SPEECH = {  # about 12 s each in espeak-ng: Whisper base needs several seconds of it to be sure
    "fr": ("Bonjour à tous et bienvenue. Aujourd'hui nous parlons de la météo dans toute la France. Il fait beau et "
           "chaud dans le sud du pays, mais il pleut en Bretagne. Demain, le vent va souffler sur les côtes.", "France"),
    "es": ("Buenos días a todos y bienvenidos. Hoy hablamos del tiempo en toda España. Hace sol y calor en el sur del "
           "país, pero llueve en Galicia. Mañana el viento va a soplar en la costa.", "Galicia"),
    "it": ("Buongiorno a tutti e benvenuti. Oggi parliamo del tempo in tutta Italia. Fa bello e caldo nel sud del "
           "paese, ma piove in Liguria. Domani il vento soffierà sulle coste.", "Italia"),
}


@pytest.mark.parametrize("voice", ["fr", "it"])
def test_synthesized_speech_in_another_language_is_detected(engine, tmp_path, voice):
    text, word = SPEECH[voice]
    events = stream(engine, espeak(text, voice, tmp_path))
    assert said(events)[-1] == (voice, True) and [lang for lang, locked in said(events) if locked] == [voice], said(events)
    finals = " ".join(e.text for e in events if e.type == "final")
    assert word.lower() in finals.lower(), finals


def test_the_allow_list_keeps_a_stream_among_its_languages(engine, tmp_path):
    two_sentences = ". ".join(SPEECH["es"][0].split(". ")[:2])
    events = stream(engine, espeak(two_sentences, "es", tmp_path), languages=("en", "de"))
    assert {lang for lang, _ in said(events)} <= {"en", "de"}
    assert {e.language for e in events if e.type == "final"} <= {"en", "de"}
