"""Normalized word error rate, shared by the tests, the benchmarks and scripts/eval_wer.py.

Both sides are normalized with openai/whisper's EnglishTextNormalizer (the `whisper-normalizer`
package carries it unchanged): lower case, punctuation and filler words ("um", "uh") dropped,
contractions and abbreviations expanded ("i've" -> "i have", "mr" -> "mister"), British spellings
Americanized, spelled-out numbers written as digits ("twenty one" -> "21"; a lone "1" is written
"one", as Whisper's own evaluation does).

Edits are counted over every utterance, including those whose reference is empty (silence): there
each hypothesis word is an insertion, so text produced over silence raises the corpus WER.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Sequence


@lru_cache(maxsize=1)
def _normalizer() -> Callable[[str], str]:
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def normalize(text: str) -> str:
    """"Mr. Dashwood, ill-disposed! I've three" -> 'mister dashwood ill disposed i have 3'.

    The normalizer leaves a lone "." for an ellipsis at the end ("into...") and for "…" anywhere; it is dropped
    here, else a streamed "word..." would count an inserted word."""
    return " ".join(w for w in _normalizer()(text).split() if w.strip("."))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of one utterance after normalize() on both sides (see corpus_wer)."""
    return corpus_wer([reference], [hypothesis])


def corpus_wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Total edits / total reference words over several utterances, after normalize().

    An empty reference contributes its hypothesis's words as insertions; an empty hypothesis is all
    deletions. With no reference words at all: 0.0 if no word was produced either, else infinity.
    """
    import jiwer

    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    refs = [normalize(r) for r in references]
    hyps = [normalize(h) for h in hypotheses]
    edits = ref_words = 0
    spoken = [(r, h) for r, h in zip(refs, hyps) if r]
    if spoken:
        out = jiwer.process_words([r for r, _ in spoken], [h for _, h in spoken])
        edits += out.substitutions + out.deletions + out.insertions
        ref_words += out.substitutions + out.deletions + out.hits
    edits += sum(len(h.split()) for r, h in zip(refs, hyps) if not r)  # text over silence
    if ref_words == 0:
        return 0.0 if edits == 0 else math.inf
    return edits / ref_words
