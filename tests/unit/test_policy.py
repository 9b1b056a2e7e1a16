"""LocalAgreement-2 with scripted hypotheses: what gets committed, never rewritten, and trimming."""

import pytest

from specscribe.models.types import Word
from specscribe.pipeline.policy import (LocalAgreement, LocalAgreementOptions, PolicyUpdate, ends_sentence,
                                        normalize_word)


def words(spec: str, start: float = 0.0, step: float = 0.5) -> list[Word]:
    """'a b c' -> words 0.5 s apart starting at `start`."""
    return [Word(start + i * step, start + i * step + 0.4, " " + t) for i, t in enumerate(spec.split())]


def texts(ws) -> list[str]:
    return [w.text.strip() for w in ws]


def test_commits_the_agreed_prefix_only():
    p = LocalAgreement()
    p.insert_audio(1.0)
    u = p.process(words("hello wor"))
    assert u.committed == () and texts(u.partial) == ["hello", "wor"]
    p.insert_audio(1.5)
    u = p.process(words("hello world how"))
    assert texts(u.committed) == ["hello"] and texts(u.partial) == ["world", "how"]
    p.insert_audio(2.0)
    u = p.process(words("hello world how are"))
    assert texts(u.committed) == ["world", "how"] and texts(u.partial) == ["are"]


def test_committed_text_is_never_rewritten():
    p = LocalAgreement()
    hyps = ["the cat", "the cat sat", "a cat sat on", "the cat sat on the", "the bat sat on the mat"]
    committed = []
    for i, h in enumerate(hyps):
        p.insert_audio(1.0 + i)
        u = p.process(words(h))
        committed += texts(u.committed)
        # what is committed stays a prefix of everything committed later
        assert texts(p.committed) == committed
    assert committed == ["the", "cat", "sat", "on", "the"]  # "bat" vs "cat": the committed "cat" stays
    u = p.finish(words("the cat sat on the mat"))
    assert texts(u.committed) == ["mat"]


def test_agreement_ignores_case_and_punctuation():
    assert normalize_word(" Hello,") == normalize_word("hello")
    p = LocalAgreement()
    p.process(words("Hello, there"))
    u = p.process(words("hello there friend"))
    assert texts(u.committed) == ["hello", "there"]  # the newer spelling is committed


def test_repeated_words_after_a_trim_are_not_committed_twice():
    p = LocalAgreement(LocalAgreementOptions(trim_after=100))
    p.insert_audio(2.0)
    p.process(words("one two three"))
    p.process(words("one two three four"))
    assert texts(p.committed) == ["one", "two", "three"]
    # the next hypothesis re-decodes committed words with slightly shifted times
    shifted = [Word(w.start + 0.05, w.end + 0.05, w.text) for w in words("one two three four five")]
    p.process(shifted)
    p.process(shifted + words("six", start=2.55))
    assert texts(p.committed) == ["one", "two", "three", "four", "five"]


def test_a_committed_word_decoded_again_is_dropped_but_a_word_said_again_is_kept():
    p = LocalAgreement(LocalAgreementOptions(trim_after=100))
    p.insert_audio(2.0)
    p.process(words("maybe just coffee"))
    p.process(words("maybe just coffee ."))
    assert texts(p.committed) == ["maybe", "just", "coffee"]  # "coffee" ends at 1.4
    # decoded again, its start DTW-shifted past the time filter (1.32 > 1.4 - 0.1): still the same word
    again = words("maybe just") + [Word(1.32, 1.6, " coffee.")]
    p.insert_audio(2.5)
    p.process(again + [Word(2.0, 2.3, " Okay")])
    p.process(again + [Word(2.0, 2.3, " Okay"), Word(2.4, 2.5, " then")])
    assert texts(p.committed) == ["maybe", "just", "coffee", "Okay"]
    # the word said again, 0.6 s after the committed one ended: speech, kept ("coffee. Coffee, it is.")
    q = LocalAgreement(LocalAgreementOptions(trim_after=100))
    q.insert_audio(2.0)
    q.process(words("maybe just coffee"))
    q.process(words("maybe just coffee"))
    said = words("maybe just coffee") + [Word(2.0, 2.3, " Coffee,"), Word(2.4, 2.5, " it"), Word(2.5, 2.7, " is.")]
    q.insert_audio(3.0)
    q.process(said)
    q.process(said)
    assert texts(q.committed) == ["maybe", "just", "coffee", "Coffee,", "it", "is."]


def _commit_then_decode_again(said: list[Word], last: Word, again: list[Word], start: float = 0.0) -> PolicyUpdate:
    """said + [last] committed by two agreeing hypotheses (the buffer from `start`), then said + again decoded twice,
    as decodes that keep the committed audio as context hear it again: what the second of those commits."""
    p = LocalAgreement(LocalAgreementOptions(trim_after=100, keep_context=8.0))
    p.skip(start)
    p.insert_audio(last.end)
    p.process(said + [last])
    p.process(said + [last])
    assert texts(p.committed) == texts(said + [last])
    p.insert_audio(again[-1].end + 0.1)
    p.process(said + again)
    return p.process(said + again)


def test_a_new_word_that_dtw_starts_inside_the_last_committed_word_is_kept():
    """JFK on the ct2 engine: "you." committed ending at 7.58; the next decodes hear "you," end at 7.42 and "ask"
    start at 7.44, before the commit's end. The committed words they decoded again (the kept context, as live keeps
    it) say where the new ones begin."""
    said = [Word(6.62, 6.82, " do"), Word(6.82, 7.08, " for")]
    again = [Word(7.08, 7.42, " you,"), Word(7.44, 8.46, " ask"), Word(8.48, 8.9, " what")]
    u = _commit_then_decode_again(said, Word(7.08, 7.58, " you."), again)
    assert texts(u.committed) == ["ask", "what"]
    assert u.committed[0].start == 7.58 and u.committed[0].end == 8.46  # clamped: finals stay in order


def test_a_word_after_a_committed_word_stretched_over_it_is_kept():
    """The lecture at --speed 3: "into..." committed as a hypothesis' last word while "kinetic" was being said, DTW
    stretching it to the audio's end (59.98-61.22); the next decodes, which hear "kinetic" whole, put "into" at
    59.98-60.5. Its end is 0.7 s off the commit's, its start where it was: the text after it is new."""
    said = [Word(58.66, 59.44, " potential"), Word(59.46, 59.98, " energy")]
    again = [Word(59.98, 60.5, " into"), Word(60.6, 61.2, " kinetic"), Word(61.5, 61.98, " energy.")]
    u = _commit_then_decode_again(said, Word(59.98, 61.22, " into..."), again, start=58.5)
    assert texts(u.committed) == ["kinetic", "energy."]
    assert u.committed[0].start == 61.22  # clamped: finals stay in order


def test_trims_at_committed_sentence_end_and_builds_the_prompt():
    p = LocalAgreement()
    p.insert_audio(3.0)
    h = words("It works. And then")
    p.process(h)
    u = p.process(h + words("more", start=2.0))
    assert texts(u.committed) == ["It", "works.", "And", "then"]
    assert u.buffer_start == h[1].end  # cut right after "works."
    start, prompt = p.window()
    assert start == h[1].end and prompt == " It works."
    q = LocalAgreement()  # "..." ends no sentence (ends_sentence), but the buffer may be cut after it
    q.insert_audio(3.0)
    h = words("It works... and then")
    q.process(h)
    assert q.process(h + words("more", start=2.0)).buffer_start == h[1].end


def test_a_sentence_cut_keeps_the_context_asked_for():
    p = LocalAgreement(LocalAgreementOptions(keep_context=2.0))
    p.insert_audio(4.0)
    h = words("One. Two. Three. Four five six")  # sentence ends at 0.4, 0.9 and 1.4 s
    p.process(h)
    u = p.process(h + words("seven", start=3.0))
    assert texts(u.committed) == ["One.", "Two.", "Three.", "Four", "five", "six"]
    assert u.buffer_start == h[1].end  # "Two.": the latest sentence end at least 2 s before "seven" (3.0 s)
    assert p.window()[1] == " One. Two."  # the prompt is what lies before the buffer


def test_long_buffer_without_sentences_is_trimmed_at_the_last_committed_word():
    p = LocalAgreement(LocalAgreementOptions(trim_after=5.0))
    hyp = words(" ".join(f"w{i}" for i in range(14)))  # 7 s, no punctuation
    p.insert_audio(7.0)
    p.process(hyp[:13])
    u = p.process(hyp)
    assert u.buffer_start == hyp[12].end  # last committed word; "w13" is still partial
    assert texts(u.partial) == ["w13"]


def test_a_long_buffer_is_cut_at_a_sentence_end_that_brings_it_under_trim_after_not_at_its_last_word():
    """Past trim_after with no sentence end far enough back for keep_context, the last committed sentence end
    wins if it makes the buffer short enough; the last committed word would start the next window right where
    the hypotheses have not settled (a word split in two, "those | days" for "Thursday")."""
    p = LocalAgreement(LocalAgreementOptions(trim_after=5.0, keep_context=8.0))
    hyp = words("one two. three four five. six seven eight nine ten eleven twelve thirteen")  # 6.5 s
    p.insert_audio(7.0)
    p.process(hyp[:12])
    u = p.process(hyp)
    assert texts(u.partial) == ["thirteen"]
    assert u.buffer_start == hyp[4].end  # "five." (2.4 s) leaves 4.6 s, under 5 s
    assert p.window()[1] == " one two. three four five."


def test_max_buffer_forces_a_commit():
    p = LocalAgreement(LocalAgreementOptions(trim_after=100, max_buffer=4.0))
    p.insert_audio(3.0)
    p.process(words("a b c"))
    p.insert_audio(5.0)
    u = p.process(words("x y z q"))  # disagrees from the first word, but the buffer is full
    assert texts(u.committed) == ["x", "y", "z", "q"] and u.partial == ()
    assert u.buffer_start >= 1.9


def test_settle_after_commits_old_words_the_hypotheses_keep_disagreeing_on():
    """A wobbling first word holds everything after it back under agreement alone; with settle_after, the
    newest hypothesis' words that have heard that many seconds after themselves are final anyway."""
    committed = {}
    for settle in (None, 3.0):
        p = LocalAgreement(LocalAgreementOptions(settle_after=settle))
        p.insert_audio(3.0)
        first = p.process(words("does b c d e f"))
        p.insert_audio(4.0)
        u = p.process(words("the b c d e f g h"))  # disagrees from its first word: agreement commits nothing
        assert first.committed == ()  # the first hypothesis' words have heard under 3 s after themselves
        committed[settle] = texts(u.committed)
        assert texts(u.committed + u.partial) == ["the", "b", "c", "d", "e", "f", "g", "h"]
    assert committed[None] == []
    assert committed[3.0] == ["the", "b"]  # ended by 1.0 s, 3 s before the audio's end; "c" (1.4 s) waits


@pytest.mark.parametrize("unsure_factor", [2.0, 1.0], ids=["unsure-later", "unsure-alike"])
def test_a_word_the_newest_hypothesis_is_unsure_of_settles_later(unsure_factor):
    """JFK's "ask not": hypotheses said "ask", one update said "asked" (p 0.4), and settle_after made it final;
    an unsure word settles only settle_unsure times as late, so the next decodes can still correct it."""
    p = LocalAgreement(LocalAgreementOptions(settle_after=3.0, settle_unsure=unsure_factor))
    p.insert_audio(3.0)
    assert p.process(words("ask not what your")).committed == ()
    p.insert_audio(4.0)
    wobbly = words("asked not what your country can")
    wobbly[0] = Word(wobbly[0].start, wobbly[0].end, wobbly[0].text, 0.4)
    u = p.process(wobbly)  # disagrees from its first word; "asked" ended at 0.4 s, 3.6 s before the audio's end
    if unsure_factor == 1.0:
        assert texts(u.committed) == ["asked", "not"]  # settled as the sure words are
        return
    assert u.committed == () and texts(u.partial)[0] == "asked"  # waits: it needs 6 s
    p.insert_audio(5.0)
    u = p.process(words("ask not what your country can do for"))  # the next decode hears it right again
    assert texts(u.committed) == ["ask", "not", "what", "your"]


def test_finish_commits_everything_and_resets():
    p = LocalAgreement()
    p.insert_audio(2.0)
    p.process(words("good morning every"))
    u = p.finish(words("good morning everyone"))
    assert texts(u.committed) == ["good", "morning", "everyone"]
    assert u.buffer_start == 2.0 and p.partial == ()


def test_skip_drops_silence_only_when_nothing_is_pending():
    p = LocalAgreement()
    p.insert_audio(1.0)
    p.process(words("pending"))
    p.skip(5.0)
    assert p.window()[0] == 0.0  # a partial word is still waiting
    p.finish(words("pending"))
    p.skip(5.0)
    assert p.window()[0] == 5.0


def test_unsure_recent_words_wait_for_more_audio():
    p = LocalAgreement(LocalAgreementOptions(min_probability=0.5, confident_after=1.5, agree_thrice=False))
    unsure = [Word(0.0, 0.5, " Howdy", 0.4), Word(0.6, 1.0, " Mary", 0.3)]
    p.insert_audio(1.5)
    p.process(unsure)
    p.insert_audio(1.9)
    assert p.process(unsure).committed == ()  # agreed twice, but unsure and recent
    p.insert_audio(2.5)
    sure = [Word(0.0, 0.4, " Had", 0.9), Word(0.4, 0.6, " he", 0.9), Word(0.6, 1.0, " married", 0.9)]
    assert p.process(sure).committed == ()  # the text changed: nothing agreed
    p.insert_audio(3.0)
    assert texts(p.process(sure).committed) == ["Had", "he", "married"]
    # an unsure word is committed once it is old enough
    p.insert_audio(3.5)
    late = sure + [Word(1.2, 1.6, " woman", 0.3)]
    p.process(late)
    p.insert_audio(3.6)
    assert texts(p.process(late).committed) == ["woman"]


def test_unsure_words_commit_when_three_hypotheses_agree():
    p = LocalAgreement(LocalAgreementOptions(min_probability=0.5, confident_after=3.0, short_window=1.0))
    hyp = [Word(0.0, 0.4, " So", 0.3), Word(0.5, 0.9, " when", 0.9), Word(1.0, 1.4, " it", 0.9)]
    p.insert_audio(1.5)
    assert p.process(hyp).committed == ()
    p.insert_audio(2.0)
    u = p.process(hyp)
    assert u.committed == () and texts(u.partial) == ["So", "when", "it"]  # twice: "So" is unsure
    p.insert_audio(2.5)
    u = p.process(hyp + [Word(1.5, 1.9, " comes", 0.9)])
    assert texts(u.committed) == ["So", "when", "it"] and texts(u.partial) == ["comes"]  # thrice
    # after a commit the older hypotheses stay aligned with what is uncommitted
    nxt = [Word(1.5, 1.9, " comes", 0.2), Word(2.0, 2.3, " back", 0.9)]
    p.insert_audio(3.0)
    assert p.process(nxt).committed == ()  # "comes" agreed twice, unsure
    p.insert_audio(3.5)
    assert texts(p.process(nxt).committed) == ["comes", "back"]


def test_a_changed_word_resets_the_three_agreements():
    p = LocalAgreement(LocalAgreementOptions(min_probability=0.5, confident_after=3.0, short_window=1.0))
    a = [Word(0.0, 0.4, " How", 0.3), Word(0.5, 0.9, " do", 0.4)]
    b = [Word(0.0, 0.4, " Had", 0.3), Word(0.5, 0.9, " do", 0.4)]
    for end, hyp in ((1.0, a), (1.5, b), (2.0, a), (2.5, a)):
        p.insert_audio(end)
        assert p.process(hyp).committed == ()  # never three in a row until ...
    p.insert_audio(3.0)
    assert texts(p.process(a).committed) == ["How", "do"]


def test_in_a_short_buffer_unsure_words_wait_for_time_even_when_agreed_thrice():
    p = LocalAgreement(LocalAgreementOptions(min_probability=0.5, confident_after=3.0, short_window=3.0))
    guess = [Word(0.0, 0.4, " How", 0.3), Word(0.5, 0.9, " do", 0.9)]
    for end in (1.0, 1.5, 2.0, 2.5):
        p.insert_audio(end)
        assert p.process(guess).committed == ()  # three and four agreements, but the buffer is short
    p.insert_audio(3.5)  # 3 s after "How": the time rule commits it
    assert texts(p.process(guess).committed) == ["How", "do"]


def test_a_pause_commits_up_to_the_first_unsure_word_and_the_next_speech_decides_the_rest():
    p = LocalAgreement()
    p.insert_audio(2.0)
    heard = words("ask not")
    heard[0] = Word(heard[0].start, heard[0].end, " asked", 0.3)
    u = p.pause(words("and so") + [Word(w.start + 1.0, w.end + 1.0, w.text, w.probability) for w in heard])
    assert texts(u.committed) == ["and", "so"] and texts(u.partial) == ["asked", "not"]
    assert p.window()[0] <= u.partial[0].start  # its audio stays in the buffer
    p.insert_audio(4.0)
    later = [Word(w.start + 1.0, w.end + 1.0, w.text) for w in words("ask not what")]
    assert texts(p.process(later).committed) == []  # disagrees with the held words: no agreement yet
    p.insert_audio(4.5)
    assert texts(p.process(later + [Word(2.6, 2.9, " your")]).committed) == ["ask", "not", "what"]
    assert texts(p.committed) == ["and", "so", "ask", "not", "what"]


def test_a_pause_holds_a_last_word_that_is_only_fairly_sure_even_when_the_hypothesis_before_agreed():
    # JFK sent 4x faster than real time: "fellow America." (p 0.51) decoded twice on the same audio before the
    # pause; the last word heard no speech after it, so it waits for the next utterance's decode
    p = LocalAgreement()
    heard = words("and so my fellow") + [Word(2.0, 2.4, " America.", 0.51)]
    p.insert_audio(2.2)
    assert texts(p.process(heard[:3]).committed) == []
    p.insert_audio(2.4)
    assert texts(p.process(heard).committed) == ["and", "so", "my"]
    u = p.pause(heard)
    assert texts(u.committed) == ["fellow"] and texts(u.partial) == ["America."]
    p.insert_audio(4.5)
    later = heard[:4] + [Word(2.0, 2.5, " Americans,"), Word(3.0, 3.3, " ask"), Word(3.4, 3.6, " not")]
    p.process(later)
    assert texts(p.process(later).committed) == ["Americans,", "ask", "not"]
    # sure enough, the same word is committed at the pause; so is a fairly sure word before the last one
    p = LocalAgreement()
    p.insert_audio(2.4)
    u = p.pause(heard[:3] + [Word(1.5, 1.9, " fellow", 0.6), Word(2.0, 2.4, " Americans.", 0.85)])
    assert texts(u.committed) == ["and", "so", "my", "fellow", "Americans."] and u.partial == ()


def test_a_hyphenated_word_is_committed_whole_or_not_at_all():
    # LibriVox 0880 streamed: " ill" agreed while its "-disposed" was still unsure; committing " ill" alone cut the
    # next decode inside the word, which came out "-sposed"
    p = LocalAgreement()
    heard = words("he was not an ill") + [Word(2.5, 2.9, "-dis", 0.3)]
    p.insert_audio(3.0)
    p.process(heard)
    assert texts(p.process(heard).committed) == ["he", "was", "not", "an"]  # not "ill" without its continuation
    whole = heard[:5] + [Word(2.5, 3.0, "-disposed", 0.9), Word(3.1, 3.4, " young", 0.9)]
    p.insert_audio(3.5)
    p.process(whole)
    assert texts(p.process(whole).committed) == ["ill", "-disposed", "young"]
    # at a pause likewise
    p = LocalAgreement()
    p.insert_audio(3.0)
    assert texts(p.pause(heard).committed) == ["he", "was", "not", "an"]


def test_finish_after_a_pause_commits_the_held_words():
    p = LocalAgreement()
    p.insert_audio(1.0)
    u = p.pause([Word(0.0, 0.4, " one"), Word(0.5, 0.9, " two", 0.2)])
    assert texts(u.committed) == ["one"]
    assert texts(p.finish(p.partial, reset=False).committed) == ["two"] and p.partial == ()


def test_ends_sentence_knows_abbreviations_and_initials():
    for text in (" fall.", " Why?", ' "Stop!"', " country.)", " etc.", " 1969.", " 終わり。", " I."):
        assert ends_sentence(text), text
    for text in (" Mr.", " Mrs.", " Dr.", " e.g.", " i.e.", " J.", " vs.", " St.", " z.B.", " and", " you,", ""):
        assert not ends_sentence(text), text
    for text in (" into...", " Now...", " the…", ' so..."', " Well... I think so..."):  # cut or trailing off
        assert not ends_sentence(text), text


def _feed(p: LocalAgreement, hyps: list[tuple[float, str]]) -> list[list[str]]:
    """Each (audio end, hypothesis) in turn; what each update committed."""
    out = []
    for end, h in hyps:
        p.insert_audio(end)
        out.append(texts(p.process(words(h)).committed))
    return out


def test_agree_gap_pairs_a_hypothesis_with_one_heard_that_much_earlier():
    hyps = [(1.0, "a b"), (1.25, "a b c"), (1.5, "a b c"), (1.75, "a b c d")]
    # successive updates 0.25 s apart agree at once
    assert _feed(LocalAgreement(), hyps) == [[], ["a", "b"], ["c"], []]
    # with a 0.5 s gap, 1.25 has no partner yet (1.0 is too close); 1.5 agrees with 1.0 on "a b",
    # 1.75 with 1.25 on "c" (its tail once "a b" was committed)
    p = LocalAgreement(LocalAgreementOptions(agree_gap=0.5))
    assert _feed(p, hyps) == [[], [], ["a", "b"], ["c"]]
    assert texts(p.partial) == ["d"]


def test_agree_gap_commits_nothing_against_an_older_hypothesis_that_disagrees():
    # 1.5's partner is 1.0 ("x y c"): nothing agrees; 1.75's is 1.25 ("a b"); 2.0's is 1.5 (tail "c")
    p = LocalAgreement(LocalAgreementOptions(agree_gap=0.5))
    got = _feed(p, [(1.0, "x y c"), (1.25, "a b"), (1.5, "a b c"), (1.75, "a b c"), (2.0, "a b c e")])
    assert got == [[], [], [], ["a", "b"], ["c"]]


def test_agree_gap_finds_a_partner_many_updates_back_and_keeps_no_more_than_it_needs():
    # a 5 s gap at 0.25 s updates: the partner is 20 hypotheses back (a fixed cap on kept hypotheses would lose it)
    p = LocalAgreement(LocalAgreementOptions(agree_gap=5.0, short_window=0.0))
    got = _feed(p, [(1.0 + 0.25 * i, "a b") for i in range(21)])
    assert got[:20] == [[]] * 20 and got[20] == ["a", "b"]
    # successive updates (no gap) keep only the two partners and the newest
    p = LocalAgreement()
    _feed(p, [(1.0 + 0.25 * i, "a b c d e f g h"[: 2 * (i % 4) + 1]) for i in range(40)])
    assert len(p._history) <= 3


def test_finals_never_start_before_the_last_commit_ends():
    """A decode of the kept context with another last word ("America." committed, "Americans," heard) matches no
    committed text, so its new words are found by time: those starting up to 0.1 s before the last commit's end
    are clamped to it, as the text path clamps, so that finals stay in time order."""
    w = lambda s, e, t: Word(s, e, " " + t, 0.9)
    p = LocalAgreement(LocalAgreementOptions(keep_context=8.0, settle_after=4.0))
    p.insert_audio(5.2)
    p.finish([w(4.0, 4.5, "fellow"), w(4.5, 5.0, "America.")], reset=False)
    committed = []
    for end, nxt in ((6.0, "sew"), (6.5, "so")):
        p.insert_audio(end)
        update = p.process([w(4.0, 4.5, "fellow"), w(4.5, 4.93, "Americans,"), w(4.95, 5.02, "Yes."), w(4.96, 5.5, nxt)])
        committed += update.committed
        assert all(x.start >= 5.0 for x in update.partial)
    assert [(x.text, x.start, x.end) for x in committed] == [(" Yes.", 5.0, 5.02)]
