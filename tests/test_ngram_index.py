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


@settings(max_examples=100, deadline=None)
@given(seqs, st.integers(1, 5), st.integers(0, 6), st.lists(st.integers(0, 40), max_size=5))
def test_index_holds_every_ngram_grown_at_once_or_piece_by_piece(keys, max_n, lo, cuts):
    whole, pieces = NgramIndex(max_n, lo), NgramIndex(max_n, lo)
    whole.grow(keys, len(keys))
    for cut in sorted(c for c in cuts if c <= len(keys)) + [len(keys)]:
        pieces.grow(keys, cut)
    assert whole.ends == pieces.ends == defined(keys, max_n, lo, len(keys))


@settings(max_examples=100, deadline=None)
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


def scanned_resync(aligner) -> int | None:
    """Where a re-synchronisation lands, by its definition: for the longest suffix first, a
    scan of the stream's words from ``lo`` to ``hi`` for the earliest match that ends at or
    after the floor (None: none)."""
    s = aligner.stream.tokens
    history_words = [aligner._key(t) for t in aligner.history if not aligner._punct(t)]
    suffix_all = history_words[-aligner.max_ngram:]
    smallest = 1 if len(aligner.history) - aligner._window_mark <= 1 else 2
    for m in range(len(suffix_all), smallest - 1, -1):
        hi = min(len(s), aligner.pos + (aligner.ahead if m > 1 else 4))
        lo = max(0, aligner.floor - 4 * m, aligner.pos - aligner.reach)
        seen = [(i, aligner._key(s[i])) for i in range(lo, hi) if not aligner._punct(s[i])]
        for j in range(m, len(seen) + 1):
            if seen[j - 1][0] + 1 >= aligner.floor and \
                    [k for _, k in seen[j - m:j]] == suffix_all[-m:]:
                return seen[j - 1][0] + 1
    return None


WORDS = [b" the", b" The", b" it", b" It", b" was", b" age", b" of", b",", b".", b" ten",
         b"10", b" a", b" times"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(WORDS) - 1), max_size=60),
       st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=12),
       st.integers(0, 60), st.integers(0, 60), st.sampled_from([4, 40]),
       st.sampled_from([8, 160]), st.booleans())
def test_resync_lands_where_a_scan_of_the_stream_says(stream_ids, history, pos, floor, ahead,
                                                      reach, keyed):
    from as2d.runtime.speculative.align import Aligner, TokenKeys
    from as2d.runtime.speculative.stream import CandidateStream

    stream = CandidateStream()
    stream.extend(stream_ids, 0.0)
    keys = TokenKeys(WORDS, lambda text: [0]) if keyed else None
    aligner = Aligner(stream, ahead=ahead, keys=keys, reach=reach)
    aligner.history = list(history)
    aligner.pos, aligner.floor = min(pos, len(stream_ids)), min(floor, pos, len(stream_ids))
    want = scanned_resync(aligner)
    before = aligner.pos
    assert aligner._resync() is (want is not None)
    assert aligner.pos == (want if want is not None else before)
