"""Normalized word error rate, shared by the tests and the benchmarks.

The normalizer is a small English one in the spirit of openai/whisper's: lower case, curly
quotes and dashes unified, punctuation dropped (apostrophes inside words kept), a few
contractions and spelled-out forms unified, numbers left as they are, whitespace collapsed.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Sequence

_REPLACEMENTS = {
    "mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint",
    "ok": "okay", "percent": "%",
}
_PUNCT = re.compile(r"[^\w\s'%]")
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """'Mr. Dashwood, ill-disposed!' -> 'mister dashwood ill disposed'."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.replace("’", "'").replace("‘", "'").replace("`", "'")
    text = re.sub(r"(\d),(\d)", r"\1\2", text)  # 1,000 -> 1000
    text = _PUNCT.sub(" ", text)
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)  # quotes, not apostrophes
    words = [_REPLACEMENTS.get(w, w) for w in _SPACE.split(text) if w]
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
