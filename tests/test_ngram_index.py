"""The one n-gram index of the look-up sources (a quoted sequence, the drafter's stream):
stated against its definition, grown at once or piece by piece."""

from hypothesis import given, settings
from hypothesis import strategies as st

from as2d.runtime.speculative.lookup import NgramIndex

seqs = st.lists(st.integers(0, 4), max_size=40)


def defined(keys, max_n, lo, end):
    """Every n-gram of ``keys`` that starts at ``lo`` or later and ends at ``end`` or before,
    with its ends in ascending order."""
    out: dict[tuple, list[int]] = {}
    for e in range(lo + 1, end + 1):
        for n in range(1, max_n + 1):
            if e - n >= lo:
                out.setdefault(tuple(keys[e - n:e]), []).append(e)
    return out


@settings(max_examples=200, deadline=None)
@given(seqs, st.integers(1, 5), st.integers(0, 6), st.lists(st.integers(0, 40), max_size=5))
def test_index_holds_every_ngram_grown_at_once_or_piece_by_piece(keys, max_n, lo, cuts):
    whole, pieces = NgramIndex(max_n, lo), NgramIndex(max_n, lo)
    whole.grow(keys, len(keys))
    for cut in sorted(c for c in cuts if c <= len(keys)) + [len(keys)]:
        pieces.grow(keys, cut)
    assert whole.ends == pieces.ends == defined(keys, max_n, lo, len(keys))


@settings(max_examples=200, deadline=None)
@given(seqs, st.integers(1, 5), st.lists(st.integers(0, 4), max_size=8), st.integers(1, 3))
def test_suffixes_are_the_occurring_ones_longest_first(keys, max_n, tail, min_n):
    index = NgramIndex(max_n)
    index.grow(keys, len(keys))
    got = list(index.suffixes(tail, min_n))
    want = [(n, index.ends[tuple(tail[-n:])])
            for n in range(min(max_n, len(tail)), min_n - 1, -1)
            if tuple(tail[-n:]) in index.ends]
    assert got == want
    assert all(ends == sorted(ends) for _, ends in got)
