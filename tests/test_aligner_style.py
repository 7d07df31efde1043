"""The aligner follows the text through the ways two Whisper models differ in style.

A drafter writes "times, it was the age of wisdom, it was" where the target writes "times."
| "It was the age of wisdom." | "It was": punctuation left out or swapped, a capital after a
full stop or a segment the target opened. None of it may cost the alignment (the pointer must
stay on the drafter's copy of the target's next word), and the candidates should be spelled the
way the target has been spelling them. A small vocabulary of whole words stands in for a
tokenizer's."""

from __future__ import annotations

from as2d.runtime.speculative.align import Aligner, TokenKeys
from as2d.runtime.speculative.stream import CandidateStream

WORDS = [" it", " It", " was", " the", " age", " of", " wisdom", " foolishness", " times",
         ",", ".", "?", " best", " worst", " less", " heartily", " so", " we", " have", " still",
         " that", " resource", " not", " just", " Ah", " Are", " laugh", " We"]
ID = {w: i for i, w in enumerate(WORDS)}
KEYS = TokenKeys([w.encode() for w in WORDS], lambda piece: (ID[piece],))


def ids(text: str) -> list[int]:
    """" it was, the" → the ids of " it", " was", ",", " the"."""
    out = []
    for word in text.replace(",", " ,").replace(".", " .").replace("?", " ?").split(" "):
        if word:
            out.append(ID[word if word in ",.?" else " " + word])
    return out


def aligner(drafted: str) -> Aligner:
    s = CandidateStream()
    s.extend(ids(drafted), 0.0)
    return Aligner(s, keys=KEYS)


def commit(a: Aligner, text: str) -> None:
    for t in ids(text):
        a.observe(t)


def test_keys_equate_case_and_set_punctuation_apart():
    assert KEYS.key(ID[" it"]) == KEYS.key(ID[" It"]) == "it"
    assert KEYS.is_punct(ID[","]) and KEYS.is_punct(ID["."])
    assert not KEYS.is_punct(ID[" it"])
    assert KEYS.capitalised([ID[" it"]]) == [ID[" It"]]
    assert KEYS.capitalised([ID[" It"]]) == [ID[" It"]]


def test_punctuation_the_target_leaves_out_is_stepped_over():
    a = aligner("the best of times, it was the worst of times")
    commit(a, "the best of times")
    a.observe(ID[" it"])  # the drafter's comma is not the target's
    assert a.synced and a.pos == 6  # just after the drafter's " it", with no search
    commit(a, "was")
    assert a.candidates(3) == ids("the worst of")


def test_punctuation_the_target_swaps_keeps_the_pointer_on_the_text():
    a = aligner("the age of wisdom, it was the age of foolishness")
    commit(a, "the age of wisdom.")
    assert a.synced
    # A full stop where the drafter wrote a comma: the next sentence starts with a capital.
    assert a.candidates(3, start="sentence") == ids("It was the")


def test_punctuation_the_drafter_did_not_write_does_not_move_the_pointer():
    a = aligner("we have still that resource")
    commit(a, "we have, still")
    assert a.synced
    assert a.candidates(2) == ids("that resource")


def test_capitals_follow_what_the_target_does_at_each_kind_of_start():
    a = aligner("it was it was it was the age")
    # At first a new segment starts with a capital, as Whisper's usually do...
    assert a.candidates(1, start="segment") == ids("It")
    # ...but this target goes on in lower case after a segment break inside a sentence.
    a.observe(ID[" it"], start="segment")
    a.observe(ID[" was"])
    assert a.synced
    assert a.candidates(1, start="segment") == ids("it")
    assert a.candidates(1, start="sentence") == ids("It")  # after a full stop: still a capital
    assert a.candidates(1) == ids("it")


def test_resynchronising_ignores_case_and_punctuation():
    # The drafter heard an extra "so" and wrote a comma; the target wrote a full stop and a
    # capital. After the extra word the pointer is off, and only a search that takes " It" and
    # " it" for the same word finds the text again.
    a = aligner("the age of wisdom, so it was the age of foolishness")
    commit(a, "the age of wisdom. It")
    assert not a.synced
    a.observe(ID[" was"])
    assert a.synced
    assert a.candidates(3) == ids("the age of")

    plain = Aligner(a.stream)  # the same search on token ids: " It" is not " it"
    for t in ids("the age of wisdom. It was"):
        plain.observe(t)
    assert not plain.synced


def test_a_wrong_jump_ahead_is_recovered_from():
    # "less heartily" is drafted twice, far apart; the first copy is misheard, so the n-gram
    # search first lands after the second. The target's next words are back at the first copy,
    # and a comma matched after the jump must not make the wrong place the confirmed one.
    first = "we laugh less heartily so we have still that resource"
    middle = " it was the age of wisdom it was the age of foolishness it was the best"
    a = aligner(first + middle + " not heartily just less heartily, it")
    commit(a, "we laugh")
    a.observe(ID[" less"])
    a.stream.tokens[a.pos] = ID[" still"]  # the drafter misheard "heartily" the first time
    a.observe(ID[" heartily"])
    assert a.pos > len(ids(first + middle))  # the wrong jump, to the second copy
    a.observe(ID[","])
    commit(a, "so we have")
    assert a.synced
    assert a.candidates(2) == ids("still that")
