"""Normalized word error rate, shared by the tests and the benchmarks.

The normalizer is a small English one in the spirit of openai/whisper's EnglishTextNormalizer:
lower case, curly quotes and dashes unified, punctuation dropped (apostrophes inside words kept),
contractions expanded as Whisper's does ("i've" -> "i have", "it's" -> "it is"), a few spelled-out
forms unified, numbers zero to twenty written as digits (Whisper writes "3 2 1 0" in one window
and "three two one zero" in the next; longer spelled-out numbers are left as they are),
whitespace collapsed.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Sequence

_REPLACEMENTS = {
    "mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint",
    "ok": "okay", "percent": "%",
}
_NUMBERS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
        " sixteen seventeen eighteen nineteen twenty".split()
    )
}
_CONTRACTIONS = [  # openai/whisper's EnglishTextNormalizer, in its order
    (r"\bwon't\b", "will not"), (r"\bcan't\b", "can not"), (r"\blet's\b", "let us"), (r"\bain't\b", "aint"),
    (r"\by'all\b", "you all"), (r"\bwanna\b", "want to"), (r"\bgotta\b", "got to"), (r"\bgonna\b", "going to"),
    (r"\bi'ma\b", "i am going to"), (r"\bimma\b", "i am going to"), (r"\bwoulda\b", "would have"),
    (r"\bcoulda\b", "could have"), (r"\bshoulda\b", "should have"), (r"\bma'am\b", "madam"),
    (r"n't\b", " not"), (r"'re\b", " are"), (r"'s\b", " is"), (r"'d\b", " would"), (r"'ll\b", " will"),
    (r"'t\b", " not"), (r"'ve\b", " have"), (r"'m\b", " am"),
]
_PUNCT = re.compile(r"[^\w\s'%]")
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """"Mr. Dashwood, ill-disposed! I've three" -> 'mister dashwood ill disposed i have 3'."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.replace("’", "'").replace("‘", "'").replace("`", "'")
    text = re.sub(r"(\d),(\d)", r"\1\2", text)  # 1,000 -> 1000
    for pattern, replacement in _CONTRACTIONS:
        text = re.sub(pattern, replacement, text)
    text = _PUNCT.sub(" ", text)
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)  # quotes, not apostrophes
    words = [_NUMBERS.get(w, _REPLACEMENTS.get(w, w)) for w in _SPACE.split(text) if w]
    return " ".join(words)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of one utterance after normalize() on both sides."""
    return corpus_wer([reference], [hypothesis])


def corpus_wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Total edits / total reference words over several utterances (jiwer on normalized text)."""
    import jiwer

    refs = [normalize(r) for r in references]
    hyps = [normalize(h) for h in hypotheses]
    keep = [(r, h) for r, h in zip(refs, hyps) if r]
    if not keep:
        return 0.0 if not any(hyps) else 1.0
    return float(jiwer.wer([r for r, _ in keep], [h if h else "" for _, h in keep]))
