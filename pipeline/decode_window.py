"""Where a live update's decode starts, what text it is prompted with, and what audio the language detector hears.

The commit policy proposes a window (the buffer start, or 30 s back) and a prompt (the committed words before
it). Four things narrow it to the utterance's own audio (`own_start`: this utterance's start, or the first
pending word's where one is older):
- a change of language: the prompt holds no text of the other language, which pulls the decode into it (German
  heard as "Where?" under an English prompt); once the new language is locked, neither does its audio;
- finals already in another language than the decode's: no prompt and no context audio;
- load (pipeline/load.py keep_context False): no context is re-decoded;
- language detection (StreamOptions.detect_apart): the detector hears the utterance alone, not the context
  before it (in the old language, it would hold a switch back); the decode keeps the context, as with a
  given language. Without detect_apart the decode hears the utterance alone too.
"""

from __future__ import annotations

from dataclasses import dataclass

from specscribe.models.types import Word
from specscribe.pipeline.caption_events import CaptionEvents
from specscribe.pipeline.language import LanguageTracker
from specscribe.pipeline.policy import StreamingPolicy

LANGUAGE_MARGIN = 0.2  # seconds of audio kept before the first word in a new language (word starts are DTW's)


@dataclass(frozen=True)
class DecodeWindow:
    """Attributes: start (seconds in the stream), prompt (text before it), detect_from (seconds: where the audio the
    language detector hears starts; 0: the window's start)."""

    start: float
    prompt: str
    detect_from: float = 0.0


def own_start(start: float, utterance_start: float, partial: list[Word]) -> float:
    """A window start (seconds) past the committed context: the utterance's start, or the first pending word's
    where one is older (words held over a pause stay in the window)."""
    own = min(utterance_start, partial[0].start) if partial else utterance_start
    return max(start, own)


def choose_window(policy: StreamingPolicy, captions: CaptionEvents, tracker: LanguageTracker | None,
                  decode_language: str | None, utterance_start: float, keep_context: bool,
                  detect_apart: bool) -> DecodeWindow:
    """The next decode's window. utterance_start: seconds; keep_context: the load allows re-decoding context."""
    since = captions.text_since
    start, prompt = policy.window(since)
    if tracker is None or tracker.state.locked:
        start = max(start, since - LANGUAGE_MARGIN)
    own = own_start(start, utterance_start, policy.partial)
    if captions.text_language not in (None, decode_language):
        return DecodeWindow(own, "")  # text (or audio) in another language would pull the decode into it
    if not keep_context:
        return DecodeWindow(own, prompt)
    if tracker is not None and tracker.needs_detection:
        return DecodeWindow(start, prompt, own) if detect_apart else DecodeWindow(own, prompt)
    return DecodeWindow(start, prompt)
