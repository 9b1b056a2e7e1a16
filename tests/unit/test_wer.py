"""The WER tooling: openai/whisper's English normalizer, edits counted over every utterance
(text over silence included), so spelling choices are not errors and missing words are."""

import math

import pytest

from specscribe.pipeline.wer import corpus_wer, normalize, wer


def test_normalize_spelling_choices_away():
    assert normalize("Mr. Dashwood, ill-disposed!") == "mister dashwood ill disposed"
    assert normalize("I've got it; you'd see, they're here. Won't you?") == "i have got it you would see they are here will not you"
    assert normalize("1,000 people, 50 percent") == "1000 people 50%"
    assert normalize("twenty-one colours, um, uh") == normalize("21 colors") == "21 colors"
    assert normalize("'Quoted' [music] (laughs)") == "quoted"
    # an ellipsis is no word: streamed finals end "into..." where their audio stopped inside speech
    assert normalize("It went into...") == "it went into" and normalize("into … kinetic") == "into kinetic"
    assert wer("it went into kinetic energy", "It went into... kinetic energy.") == 0.0
    assert wer("it went into kinetic energy", "It went into … kinetic energy.") == 0.0
    assert normalize("version 2.0, at 10.30.") == "version 2 at 10.30"


def test_normalizer_is_whisper_english_not_a_subset():
    """Cases a hand-written subset got wrong: British spellings, fillers, compound numbers, ordinals."""
    assert normalize("The colour of the theatre") == normalize("the color of the theater")
    assert normalize("He came in twenty third") == normalize("he came in 23rd")
    assert normalize("two hundred and five dollars") == "$205"
    assert normalize("Hmm, well") == "well"


def test_wer_counts_real_differences_only():
    assert wer("I am sure it's three", "I'm sure it is 3.") == 0.0
    assert wer("the cat sat", "the bat sat") == pytest.approx(1 / 3)
    assert corpus_wer(["a b", "c d"], ["a c", "c d"]) == 0.25


def test_missing_words_are_deletions():
    assert wer("the cat sat", "") == 1.0
    assert corpus_wer(["the cat sat", "on the mat"], ["the cat sat", ""]) == 0.5


def test_text_over_silence_counts_as_insertions():
    # an empty reference (silence) adds its hypothesis's words to the edits, not to the reference words
    assert corpus_wer(["a b", ""], ["a c", ""]) == 0.5
    assert corpus_wer(["a b", ""], ["a b", "thank you"]) == 1.0
    assert corpus_wer(["a b c d", ""], ["a b c d", "thank you"]) == 0.5
    assert wer("", "") == 0.0 and math.isinf(wer("", "thank you"))
    with pytest.raises(ValueError):
        corpus_wer(["a"], [])
