"""The WER normalizer: Whisper-style contractions and small numbers, so spelling choices are not errors."""

from specscribe.pipeline.wer import corpus_wer, normalize, wer


def test_normalize_spelling_choices_away():
    assert normalize("Mr. Dashwood, ill-disposed!") == "mister dashwood ill disposed"
    assert normalize("I've got it; you'd see, they're here. Won't you?") == "i have got it you would see they are here will not you"
    assert normalize("Three, two, one, zero!") == normalize("3 2 1 0") == "3 2 1 0"
    assert normalize("1,000 people, 50 percent") == "1000 people 50 %"
    assert normalize("'Quoted' rock'n'roll") == "quoted rock'n'roll"


def test_wer_counts_real_differences_only():
    assert wer("I am sure it's three", "I'm sure it is 3.") == 0.0
    assert wer("the cat sat", "the bat sat") == 1 / 3
    assert corpus_wer(["a b", ""], ["a c", ""]) == 0.5
