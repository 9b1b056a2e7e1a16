"""Streaming policies: which words of a re-decoded buffer become final, and what audio to keep.

A policy never touches a model. The session asks it which span to decode (`window`), decodes it,
and hands back the hypothesis as words with absolute times (`process`); the policy answers with
newly committed words, the partial tail and how much audio it still needs. `finish` commits all.

LocalAgreement-2 (after ufal/whisper_streaming's HypothesisBuffer / OnlineASRProcessor):
- each update re-decodes the uncommitted buffer, with text committed before it as the prompt;
- the longest common prefix of the newest hypothesis and the one before it (after the committed
  words) is committed; with ``agree_gap`` the partner is the newest hypothesis whose audio ended at
  least that many seconds earlier, so frequent updates (partials sooner) do not make agreement cheaper:
  two decodes 0.25 s apart hear nearly the same audio and agree on its guesses too;
  the committed prefix excludes a word the newest hypothesis is unsure of (probability < min_probability): Whisper's
  guesses can agree twice, so an unsure word needs the last three hypotheses to agree on it, or
  `confident_after` seconds of audio after it. While the buffer is shorter than `short_window`
  (an utterance's first seconds) only the time rule counts: on so little audio Whisper's guesses
  agree three times too ("How do you marry the more" for "Had he married a more");
- committed text is append-only: it is never rewritten, only extended;
- the buffer start moves to the end of the last committed sentence that leaves `keep_context` seconds
  before the uncommitted words (past `trim_after` seconds, the last committed sentence end if that brings it
  under `trim_after`, else the last committed word), so the decoded
  span stays bounded and latency flat; the context kept is decoded again (and dropped by `_new_words`)
  because Whisper hears a short turn much better after the ones before it;
- a word of the newest hypothesis that ends `settle_after` seconds before the audio's end is committed
  (with the words before it) even if no partner agrees: it has heard that much speech after itself, and
  hypotheses that keep disagreeing on it would otherwise hold every word after it back. On conversation a
  wobbling first word ("Does Delina need" / "The Elina needs") held 16 s of speech uncommitted on a CPU whose
  updates come 2-3 s apart; each longer buffer made the next update slower still. A word the newest hypothesis is
  unsure of settles only `settle_unsure` times as late: JFK's "ask" (p 0.2-0.5 in most windows) came out "asked"
  in one update of a browser run and was settled so, between hypotheses that said "ask";
- past `max_buffer` seconds the hypothesis is committed by force, so the buffer stays bounded;
- at a pause (a VAD speech end) the hypothesis is committed up to its first unsure word; the unsure
  rest waits for the speech after the pause (Whisper often hears a word right only with what follows:
  JFK's "ask not" comes out "asked not" (p 0.29) from the short utterance alone), or for the pause to
  become an end. The last word heard no speech after it, and hypotheses that hear the same audio agree on
  its guess, so it is sure only at `pause_probability`: JFK's "fellow Americans" came out "fellow America."
  (p 0.51) twice before the pause, while the next utterance's decode hears "Americans, ask not".
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from specscribe.models.types import Word

SENTENCE_END = (".", "?", "!", "。", "？", "！")
ELLIPSES = ("...", "…")  # not a sentence end (ends_sentence)
CLOSING_MARKS = "\"'”’»)]」』"  # after a sentence's or clause's mark: `"Why?"` ends a sentence
# words Whisper writes with a period that do not end a sentence (compared as normalize_word gives them)
ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "messrs", "mme", "mlle", "dr", "prof", "st", "mt", "jr", "sr", "sra", "srta", "gen", "col",
    "capt", "lt", "sgt", "gov", "sen", "rep", "rev", "vs", "eg", "ie", "cf", "approx", "fig", "nr", "bzw", "zb", "usw",
})
_PUNCT = re.compile(r"[^\w']+", re.UNICODE)
# A hypothesis' first uncommitted word that repeats the last committed word(s) is that word decoded again only
# if it starts within this many seconds of their end: DTW puts a re-decoded word where it was (a few hundredths
# apart), while a word said again comes after it ("... just coffee." / "Coffee, it is.": 0.6 s later).
REDECODED_WITHIN = 0.3
# The committed words a hypothesis decoded again (the kept context) are found by their text when their last one ends
# within this many seconds of the last commit's end (LocalAgreement._after_committed).
REALIGN_WITHIN = 0.5


def normalize_word(text: str) -> str:
    """The form two hypotheses' words are compared in: lower case, punctuation and spaces dropped."""
    return _PUNCT.sub("", text.lower())


def ends_sentence(text: str) -> bool:
    """Whether a word (or a text, by its last word) ends a sentence: its last mark (before closing quotes or
    brackets) is a SENTENCE_END, and it is not an abbreviation ("Mr.", "e.g.") or an initial ("J.") that
    Whisper writes with a period ("I." is the pronoun: "So do I."), nor an ellipsis: Whisper writes "..." where
    the audio it heard stops inside speech, so a streamed hypothesis ends that way whenever its buffer ends
    inside a word (the lecture's "into..." before "kinetic energy."), and where a speaker pauses mid-sentence."""
    if not ends_with_mark(text, SENTENCE_END) or ends_with_mark(text, ELLIPSES):
        return False
    core = normalize_word(text.split()[-1])
    abbreviated = core in ABBREVIATIONS or (len(core) == 1 and core.isalpha() and core != "i")
    return not (abbreviated and ends_with_mark(text, (".",)))


def ends_with_mark(text: str, marks: tuple[str, ...]) -> bool:
    """Whether a word (or a text) ends with one of marks, before any closing quotes or brackets."""
    return text.strip().rstrip(CLOSING_MARKS).endswith(marks)


def _common_prefix(*hypotheses: Sequence[Word]) -> int:
    """How many leading words all the hypotheses share (compared normalized)."""
    n = 0
    while all(n < len(h) for h in hypotheses) and len({normalize_word(h[n].text) for h in hypotheses}) == 1:
        n += 1
    return n


def _whole_words(words: Sequence[Word], n: int) -> int:
    """n, or fewer so that words[:n] does not end inside a hyphenated word. Whisper's word split makes
    "ill-disposed" two words, " ill" and "-disposed": committing " ill" alone cuts the next decode's audio
    inside the word ("ill -sposed", LibriVox 0880 streamed)."""
    while 0 < n < len(words) and words[n].text.startswith("-"):
        n -= 1
    return n


@dataclass(frozen=True)
class PolicyUpdate:
    """What one `process`/`finish` call decided.

    Attributes:
        committed: words that became final now (absolute seconds), in order.
        partial: the uncommitted tail of the latest hypothesis.
        buffer_start: seconds; audio before it is no longer needed by the policy.
    """

    committed: tuple[Word, ...] = ()
    partial: tuple[Word, ...] = ()
    buffer_start: float = 0.0


@dataclass(frozen=True)
class LocalAgreementOptions:
    """Attributes:
        trim_after: buffer seconds past which the buffer is trimmed even if that leaves less than
            keep_context: at the last committed sentence end if that brings it under trim_after, else at
            the last committed word.
        max_buffer: buffer seconds past which the whole hypothesis is committed by force.
        prompt_chars: characters of committed text (before the buffer) given as the prompt.
        min_trim_gap: seconds a trim point keeps before the next uncommitted word starts.
        min_probability: an agreed word is committed only if the newest hypothesis gives it at
            least this probability (Whisper's guesses on too little audio agree too) ...
        agree_thrice: ... or if three successive hypotheses agree on it (False: time only) and
            the buffer holds at least short_window seconds ...
        confident_after: ... or once it ends this many seconds before the end of the audio.
        short_window: see agree_thrice.
        keep_context: a sentence-end trim leaves at least this many seconds of committed audio before the
            first uncommitted word (or the audio's end); 0 cuts at the last committed sentence end.
        agree_gap: seconds of audio a hypothesis' partner in agreement must be older by (the newest such
            hypothesis; three-way agreement likewise takes the partner's partner); 0: the previous one.
        settle_after: a word of the newest hypothesis ending this many seconds before the audio's end is
            committed without agreement, with the words before it (None: agreement, pauses and max_buffer only).
        settle_unsure: ... a word it is unsure of (under min_probability) only this many times as long before.
        pause_probability: at a pause, the hypothesis' last word (it heard no speech after it) is committed only
            at this probability or more; the words before it at min_probability.
    """

    trim_after: float = 12.0
    max_buffer: float = 25.0
    prompt_chars: int = 200
    min_trim_gap: float = 0.0
    min_probability: float = 0.5
    agree_thrice: bool = True
    short_window: float = 3.0
    confident_after: float = 3.0
    keep_context: float = 0.0
    agree_gap: float = 0.0
    settle_after: float | None = None
    settle_unsure: float = 2.0
    pause_probability: float = 0.8


class StreamingPolicy(Protocol):
    """insert_audio / window / process / finish; pure state, no model."""

    @property
    def partial(self) -> tuple[Word, ...]:
        """The uncommitted tail of the last hypothesis (absolute seconds)."""
        ...

    def insert_audio(self, end: float) -> None:
        """Audio up to `end` seconds is in the buffer."""
        ...

    def window(self, since: float = 0.0) -> tuple[float, str]:
        """(start seconds of the span to decode, prompt text). The span ends at the last inserted audio.
        since: the prompt holds only committed words that start at or after it (seconds)."""
        ...

    def process(self, words: Sequence[Word]) -> PolicyUpdate:
        """The hypothesis for [window start, audio end) as words with absolute times."""
        ...

    def pause(self, words: Sequence[Word]) -> PolicyUpdate:
        """Last hypothesis before a pause in speech: commit it up to its first unsure word; the rest
        stays pending (the partial), with its audio, until speech resumes (the next hypotheses, which
        hear what follows, decide it) or `finish` (the pause became an end)."""
        ...

    def finish(self, words: Sequence[Word], reset: bool = True) -> PolicyUpdate:
        """Last hypothesis of the buffer (end of utterance or stream): commit all of it. `pause` and `finish`
        also take `partial` itself (the held tail, committed without a new decode), whose words are all new.

        reset: also empty the buffer; False keeps it (trimmed as usual) as the next utterance's context.
        """
        ...

    def skip(self, to: float) -> None:
        """No speech before `to` (seconds): drop it from the buffer if nothing is pending there."""
        ...


@dataclass
class LocalAgreement:
    """LocalAgreement-2. One instance per stream."""

    options: LocalAgreementOptions = field(default_factory=LocalAgreementOptions)
    buffer_start: float = 0.0
    audio_end: float = 0.0
    committed: list[Word] = field(default_factory=list)  # every committed word, for the prompt
    _in_buffer: list[Word] = field(default_factory=list)  # committed words inside the buffer
    # recent hypotheses, oldest first, as (audio end in seconds, uncommitted tail), the tails aligned with
    # what is still uncommitted; the last one is the partial. None older than the oldest partner is kept
    # (partners only move forward), so it spans about two agree_gap of updates
    _history: list[tuple[float, list[Word]]] = field(default_factory=list)
    _last_end: float = 0.0  # end of the last committed word

    # ---- the protocol ----
    def insert_audio(self, end: float) -> None:
        self.audio_end = max(self.audio_end, end)

    def window(self, since: float = 0.0) -> tuple[float, str]:
        start = max(self.buffer_start, self.audio_end - 30.0)
        before = [w for w in self.committed[-60:] if since - 1e-6 <= w.start and w.end <= self.buffer_start + 1e-6]
        prompt = "".join(w.text for w in before)[-self.options.prompt_chars :]
        return start, prompt if prompt.strip() else ""

    def process(self, words: Sequence[Word]) -> PolicyUpdate:
        new = self._new_words(words)
        o = self.options
        found = self._partners()
        partners = [self._history[i][1] for i in found]
        twice = _common_prefix(new, partners[0]) if partners else 0
        thrice = _common_prefix(new, *partners) if o.agree_thrice and len(partners) > 1 else 0
        short = self.audio_end - self.buffer_start < o.short_window
        agreed = 0
        while agreed < twice:
            word = new[agreed]
            unsure = word.probability < o.min_probability and word.end > self.audio_end - o.confident_after
            if unsure and (short or agreed >= thrice):
                break
            agreed += 1
        if o.settle_after is not None:  # words that have heard settle_after seconds after themselves
            settled, unsure = self.audio_end - o.settle_after, self.audio_end - o.settle_after * o.settle_unsure
            old = itertools.takewhile(lambda w: w.end <= (settled if w.probability >= o.min_probability else unsure), new)
            agreed = max(agreed, len(list(old)))
        agreed = _whole_words(new, agreed)
        commit = new[:agreed]
        self._advance(commit, new[agreed:], found[-1] if len(found) == 2 else 0)
        if self.audio_end - self.buffer_start > self.options.max_buffer and self.partial:
            commit = commit + new[agreed:]  # the buffer must not grow further: commit by force
            self._history = []
        self._commit(commit)
        self._trim()
        return PolicyUpdate(tuple(commit), self.partial, self.buffer_start)

    def pause(self, words: Sequence[Word]) -> PolicyUpdate:
        new = self._uncommitted(words)
        # the last word heard no speech after it: it needs pause_probability, the others min_probability
        bars = [self.options.min_probability] * (len(new) - 1) + [self.options.pause_probability]
        sure = len(list(itertools.takewhile(lambda wb: wb[0].probability >= wb[1], zip(new, bars))))
        sure = _whole_words(new, sure)
        self._commit(new[:sure])
        self._history = [(self.audio_end, new[sure:])] if new[sure:] else []
        self._trim()
        return PolicyUpdate(tuple(new[:sure]), self.partial, self.buffer_start)

    def finish(self, words: Sequence[Word], reset: bool = True) -> PolicyUpdate:
        commit = self._uncommitted(words)
        self._commit(commit)
        self._history = []
        if reset:
            self._in_buffer = []
            self.buffer_start = max(self.buffer_start, self.audio_end)
        else:  # keep the audio as context for the next utterance; skip() drops it
            self._trim()
        return PolicyUpdate(tuple(commit), (), self.buffer_start)

    def skip(self, to: float) -> None:
        if not self.partial:
            self.audio_end = max(self.audio_end, to)
            self.buffer_start = max(self.buffer_start, to)
            self._in_buffer = [w for w in self._in_buffer if w.end > self.buffer_start]

    # ---- helpers ----
    @property
    def partial(self) -> tuple[Word, ...]:
        return tuple(self._history[-1][1]) if self._history else ()

    def _partners(self) -> list[int]:
        """Indices in _history of the hypotheses the newest must agree with: the newest whose audio ended
        agree_gap seconds before this one's, then the newest agree_gap before that (at most two)."""
        found, limit = [], self.audio_end
        for i in range(len(self._history) - 1, -1, -1):
            end = self._history[i][0]
            if end <= limit - self.options.agree_gap + 1e-6:
                found.append(i)
                if len(found) == 2:
                    break
                limit = end
        return found

    def _advance(self, commit: Sequence[Word], tail: list[Word], keep_from: int) -> None:
        """Record the newest hypothesis' tail; forget the hypotheses before index keep_from (older than the
        oldest partner: no later hypothesis can pair with them) and drop the committed words from the other
        tails (a tail that does not start with them cannot agree with what follows them, so it goes)."""
        n, said = len(commit), [normalize_word(w.text) for w in commit]
        kept = [(end, old[n:]) for end, old in self._history[keep_from:]
                if [normalize_word(w.text) for w in old[:n]] == said]
        self._history = kept + [(self.audio_end, tail)]

    def _uncommitted(self, words: Sequence[Word]) -> list[Word]:
        """A hypothesis' words after the committed ones; the partial's are that already (stripping them again
        would drop a first word that repeats the last committed one: "very very", "no, no")."""
        partial = self.partial
        if partial and len(words) == len(partial) and all(a is b for a, b in zip(words, partial)):
            return list(words)
        return self._new_words(words)

    def _after_last(self, word: Word) -> Word:
        """The word, starting no earlier than the last commit ends: finals stay in time order."""
        if word.start >= self._last_end:
            return word
        return Word(self._last_end, max(word.end, self._last_end), word.text, word.probability)

    def _new_words(self, words: Sequence[Word]) -> list[Word]:
        """The hypothesis minus what is already committed: the words after the committed words it decoded again,
        found by their text; without them, by time, then by an n-gram overlap at the same time."""
        words = [w for w in words if w.text.strip()]
        after = self._after_committed(words)
        if after is not None:
            return [self._after_last(w) for w in words[after:]]
        new = [self._after_last(w) for w in words if w.start > self._last_end - 0.1]
        if new and self._in_buffer and new[0].start - self._last_end < REDECODED_WITHIN:
            for n in range(min(len(self._in_buffer), len(new), 5), 0, -1):
                tail = [normalize_word(w.text) for w in self._in_buffer[-n:]]
                head = [normalize_word(w.text) for w in new[:n]]
                if tail == head:
                    new = new[n:]
                    break
        return new

    def _after_committed(self, words: Sequence[Word]) -> int | None:
        """Where the words after the last committed ones begin in a hypothesis that decoded the kept context again:
        after its longest run (up to 5 words) equal to the last committed words whose last word ends within
        REALIGN_WITHIN of the last commit's end, or starts within it of the last committed word's start (the nearest
        such run); None without one. The text decides, not the times: DTW moves a boundary by tenths between
        decodes, and a time rule alone dropped JFK's "ask" that followed a committed "you." (7.08-7.58) at 7.44-8.46
        in a decode that heard "you," end at 7.42. The start counts too because a word committed as a hypothesis'
        last one, its audio cut in the next word, is stretched over that word: the lecture's "into..." (59.98-61.22,
        "kinetic" said at 60.6) was heard again as "into" ending at 60.5, and "kinetic" was lost."""
        if not self._in_buffer:
            return None
        last = self._in_buffer[-1]
        said = [normalize_word(w.text) for w in words]
        tail = [normalize_word(w.text) for w in self._in_buffer[-5:]]

        def apart(i: int) -> float:  # how far the run ending at words[i - 1] is from the last committed word
            return min(abs(words[i - 1].end - self._last_end), abs(words[i - 1].start - last.start))

        for n in range(min(len(tail), len(said)), 0, -1):
            runs = [i for i in range(n, len(said) + 1) if said[i - n : i] == tail[-n:] and apart(i) <= REALIGN_WITHIN]
            if runs:
                return min(runs, key=apart)
        return None

    def _commit(self, words: Sequence[Word]) -> None:
        if not words:
            return
        self.committed.extend(words)
        self._in_buffer.extend(words)
        self._last_end = max(self._last_end, words[-1].end)
        if len(self.committed) > 400:  # the prompt needs only the tail
            del self.committed[:-200]

    def _trim(self) -> None:
        """Move the buffer start to a committed sentence end or "..." word (or any committed word when long)."""
        if not self._in_buffer:
            return
        partial = self.partial
        limit = partial[0].start - self.options.min_trim_gap if partial else float("inf")
        context_end = min(limit, self.audio_end) - self.options.keep_context  # a sentence cut keeps this much
        fits = [w for w in self._in_buffer if w.end <= limit]  # committed, before the uncommitted words
        # a word Whisper wrote with "..." ends no sentence, but the buffer may be cut after it: on the lecture at
        # --speed 3 (AVX2 EPYC), cutting at true sentence ends only left its long sentences fewer cut points, long
        # buffers were cut at bare words, and the text got worse (5.3 % WER against batch, 2.3 % with; benchmarks.md)
        ends = [w.end for w in fits if ends_sentence(w.text) or ends_with_mark(w.text, ELLIPSES)]
        cut = max((e for e in ends if e <= context_end), default=None)
        longest = min(self.options.trim_after, self.options.max_buffer)
        if cut is None and self.audio_end - self.buffer_start > longest:
            # too long: the last committed sentence end, if that brings it under trim_after; only without
            # one, the last committed word (a cut there can split a word the hypotheses have not settled:
            # "those | days" for "Thursday", and the rest decodes without context)
            last = ends[-1] if ends and self.audio_end - ends[-1] <= longest else None
            cut = last if last is not None else (fits[-1].end if fits else None)
        if cut is not None and cut > self.buffer_start:
            self.buffer_start = cut
            self._in_buffer = [w for w in self._in_buffer if w.end > cut]
