"""Sentences to synthesize, from offline sources: Debian fortunes (en, de, es, it), licence texts
(/usr/share/common-licenses) and gettext catalogues (/usr/share/locale/LANG/LC_MESSAGES/*.mo, which
also give French). Texts that share a word 6-gram with an evaluation transcript are dropped.
"""

from __future__ import annotations

import gettext
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

FORTUNES_DIR = Path("/usr/share/games/fortunes")
LICENSES_DIR = Path("/usr/share/common-licenses")
LOCALE_DIR = Path("/usr/share/locale")
LANGUAGES = ("en", "de", "fr", "es", "it")

_WS = re.compile(r"\s+")
_PLACEHOLDER = re.compile(r"%[-+ #0-9.]*[a-zA-Z]|\{[^}]*\}|\$\w+|<[^>]*>|&\w+;|_(?=\w)")
_ATTRIBUTION = re.compile(r"\s--\s*[A-Z(].*$|\s-- ?$")
_WORD = re.compile(r"\w+", re.UNICODE)
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_EMPTY_QUOTE = re.compile(r"['\"»«„“”‘’]\s*['\"»«„“”‘’]|\(\s*\)|\s[,.]")


@dataclass(frozen=True)
class TextItem:
    """One sentence or short passage.

    Attributes:
        text: the text, whitespace collapsed.
        lang: ISO code of its language.
        source: where it came from ("fortunes:de/bahnhof", "license:GPL-3", "gettext:fr/apt").
    """

    text: str
    lang: str
    source: str


def clean(text: str, min_chars: int = 12, max_chars: int = 360) -> str | None:
    """Collapse whitespace, drop attributions and placeholders; None when it is not speakable prose."""
    text = _PLACEHOLDER.sub(" ", text)
    text = _WS.sub(" ", text).strip()
    text = _ATTRIBUTION.sub("", text).strip()
    if not (min_chars <= len(text) <= max_chars):
        return None
    letters = len(_LETTER.findall(text))
    if letters < 0.7 * len(text.replace(" ", "")) or len(_WORD.findall(text)) < 3:
        return None
    if any(ch in text for ch in "|\\^~`") or re.search(r"(.)\1{3,}", text):
        return None  # ascii art, code, rules
    if _EMPTY_QUOTE.search(text) or not text[0].isalnum():
        return None  # a message whose placeholder was removed
    return text


def _read(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _fortune_files(root: Path, lang: str) -> list[Path]:
    """Fortune text files of one language: English at the top (regular files), others in LANG/."""
    folder = root if lang == "en" else root / lang
    if not folder.is_dir():
        return []
    files = []
    for path in sorted(folder.iterdir()):
        if path.is_symlink() or not path.is_file() or path.suffix in (".dat", ".u8"):
            continue
        utf8 = path.with_name(path.name + ".u8")
        files.append(utf8 if utf8.is_file() and not utf8.is_symlink() else path)
    return files


def fortunes(lang: str, root: Path = FORTUNES_DIR) -> Iterable[TextItem]:
    for path in _fortune_files(root, lang):
        for chunk in _read(path).split("\n%\n"):
            text = clean(chunk)
            if text:
                yield TextItem(text, lang, f"fortunes:{lang}/{path.name}")


def licenses(root: Path = LICENSES_DIR) -> Iterable[TextItem]:
    for path in sorted(root.glob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        for para in re.split(r"\n\s*\n", _read(path)):
            for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z])", _WS.sub(" ", para)):
                text = clean(sentence, min_chars=25)
                if text:
                    yield TextItem(text, "en", f"license:{path.name}")


def gettext_strings(lang: str, root: Path = LOCALE_DIR) -> Iterable[TextItem]:
    """Translated messages (msgstr) of the installed gettext catalogues of one language."""
    folder = root / lang / "LC_MESSAGES"
    for path in sorted(folder.glob("*.mo")) if folder.is_dir() else []:
        try:
            with open(path, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog  # noqa: SLF001 (no public accessor)
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        for key, value in sorted(catalog.items(), key=lambda kv: str(kv[0])):
            if not key or not isinstance(value, str) or "\n" in value.strip():
                continue
            text = clean(value, min_chars=25)
            if text and len(_WORD.findall(text)) >= 5:
                yield TextItem(text, lang, f"gettext:{lang}/{path.stem}")


def ngrams(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def exclude_overlap(items: Iterable[TextItem], references: Sequence[str], n: int = 6) -> list[TextItem]:
    """Drop items that share a word n-gram with any reference (the evaluation transcripts)."""
    banned: set[tuple[str, ...]] = set()
    for ref in references:
        banned |= ngrams(ref, n)
    return [item for item in items if not (ngrams(item.text, n) & banned)]


def corpus(languages: Sequence[str] = LANGUAGES, references: Sequence[str] = ()) -> dict[str, list[TextItem]]:
    """{lang: unique texts} from every source found on this machine, evaluation overlap removed."""
    out: dict[str, list[TextItem]] = {}
    for lang in languages:
        items = list(fortunes(lang))
        items += list(licenses()) if lang == "en" else list(gettext_strings(lang))
        seen: set[str] = set()
        unique = [it for it in items if not (it.text in seen or seen.add(it.text))]
        out[lang] = exclude_overlap(unique, references)
    return out


def evaluation_transcripts() -> list[str]:
    """Reference texts of the evaluation clips (JFK, LibriVox) when installed."""
    from specscribe.clips import JFK_TEXT, librivox_clips

    refs = [JFK_TEXT]
    try:
        refs += list(librivox_clips().values())
    except OSError:
        pass
    return refs
