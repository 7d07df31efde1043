"""Word timestamps: whisper's alignment (cross-attention heads, median filter, DTW) over the
tokens a window committed — close to faster-whisper's on the same weights, and never a change
to the transcript, whichever decoder made it."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from as2d.runtime.audio import load_audio
from as2d.runtime.whisper.alignment import (
    APPEND_PUNCTUATIONS,
    PREPEND_PUNCTUATIONS,
    _Timing,
    dtw,
    median_filter,
    merge_punctuations,
    split_words,
)


# -- the numerical steps, against their definitions -------------------------------------------
def reference_dtw(x: np.ndarray):
    """The textbook recurrence, cell by cell (diagonal step wins only when strictly cheaper,
    then the row step, else the column step), and its backtrace."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, np.float32)
    cost[0, 0] = 0
    trace = np.full((n + 1, m + 1), -1)
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :], trace[:, 0] = 2, 1
    i, j, path = n, m, []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        i, j = {0: (i - 1, j - 1), 1: (i - 1, j), 2: (i, j - 1)}[int(trace[i, j])]
    return np.array(path[::-1]).T


@pytest.mark.parametrize("shape,ties", [((1, 1), False), ((3, 9), False), ((12, 40), False),
                                        ((9, 9), True), ((20, 7), True)])
def test_dtw_is_the_cell_by_cell_recurrence(shape, ties):
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape)
    if ties:  # few distinct values: tie-breaking decides the path
        x = np.round(x)
    rows, cols = dtw(x)
    expected = reference_dtw(x)
    assert np.array_equal(rows, expected[0]) and np.array_equal(cols, expected[1])
    # A path: starts at the first cell, ends at the last, moves by one step at a time.
    assert (rows[0], cols[0]) == (0, 0) and (rows[-1], cols[-1]) == (shape[0] - 1, shape[1] - 1)
    assert set(zip(np.diff(rows), np.diff(cols))) <= {(1, 1), (1, 0), (0, 1)}


@pytest.mark.parametrize("ties", [False, True])
def test_median_filter_is_a_reflect_padded_running_median(ties):
    x = np.array([[5.0, 1, 9, 3, 7, 2, 8, 6, 4, 0]])
    padded = np.concatenate([x[0, 3:0:-1], x[0], x[0, -2:-5:-1]])
    assert np.array_equal(median_filter(x)[0], [np.median(padded[i:i + 7]) for i in range(10)])
    # Every shape the aligner gives it ([heads, tokens, frames]), down to 4 frames: the median
    # of each reflect-padded run of 7, as a sort finds it.
    rng = np.random.default_rng(7)
    for frames in (4, 5, 8, 61, 1500):
        y = rng.normal(size=(3, 5, frames))
        if ties:
            y = np.round(y)
        runs = np.lib.stride_tricks.sliding_window_view(
            np.pad(y, [(0, 0), (0, 0), (3, 3)], mode="reflect"), 7, axis=-1)
        assert np.array_equal(median_filter(y), np.sort(runs, axis=-1)[..., 3])
    short = np.array([[1.0, 5.0, 2.0]])
    assert np.array_equal(median_filter(short), short), "too short to reflect: unchanged"


# -- words ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(whisper):
    return whisper("base", "int8").tokenizer


def test_tokens_group_into_space_led_words(tokenizer):
    text = " Mr. Dashwood's naïve café, 日本語!"
    tokens = tokenizer.encode(text) + [tokenizer.eot]
    words, groups = split_words(tokenizer, tokens, "en")
    assert "".join(words[:-1]) == text and words[-1] == "<|endoftext|>"
    assert [t for g in groups for t in g] == tokens
    assert words[:3] == [" Mr", ".", " Dashwood's"]
    assert " naïve" in words and " café" in words  # multi-byte letters stay inside words


def test_languages_without_spaces_split_at_each_whole_character(tokenizer):
    text = "日本語です"
    tokens = tokenizer.encode(text) + [tokenizer.eot]
    words, groups = split_words(tokenizer, tokens, "ja")
    assert "".join(words[:-1]) == text
    # A character split over tokens stays whole; otherwise each token is a word of its own.
    assert all("\ufffd" not in w for w in words)
    assert len(words) >= 4 and all(len(g) <= 3 for g in groups)


def test_punctuation_joins_its_neighbour():
    al = [_Timing(w, [i], 0, 0, 1) for i, w in enumerate([" \"", "Hello", ",", " world", "."])]
    merge_punctuations(al, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    assert [(t.word, t.tokens) for t in al] == [("", []), (" \"Hello,", [0, 1, 2]), ("", []),
                                                (" world.", [3, 4]), ("", [])]


# -- on real audio ----------------------------------------------------------------------------
def aligned_model(whisper):
    """base int8 on two threads, the session's: it declares word timestamps' graph as the
    loader does (the bundle's, else added on first use), and is the model the session's
    target-only references are decoded with."""
    return whisper("base", "int8", 2)


def transcribe(model, path, decoder=None, **options):
    from as2d.runtime.transcribe.longform import LongFormTranscriber
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions

    opts = TranscribeOptions(language="en", **options)
    return list(LongFormTranscriber(model, decoder).transcribe(load_audio(path), opts))


@pytest.fixture(scope="module")
def words_of(whisper):
    """``words_of(path)`` → the aligned base model's target-only segments with words, decoded
    once per clip for the module: three tests read the same run (its words against the text,
    against the other decoders', against faster-whisper's), none changes it."""
    runs: dict = {}

    def get(path):
        if path not in runs:
            runs[path] = tuple(transcribe(aligned_model(whisper), path,
                                          word_timestamps=True))
        return runs[path]

    return get


@pytest.fixture(scope="module")
def two_cities(clips):
    found = [c.path for c in clips if c.name == "two_cities.wav"]
    if not found:
        pytest.skip("moonshine-voice's two_cities.wav is not installed")
    return found[0]


def test_words_spell_each_segment_and_run_forward_in_time(words_of, two_cities):
    segs = words_of(two_cities)
    assert len({s.seek for s in segs}) >= 2, "more than one window"
    previous_end = 0.0
    for s in segs:
        assert s.words, s.text
        assert "".join(w.word for w in s.words) == s.text
        assert s.start == s.words[0].start and s.end == s.words[-1].end
        for w in s.words:
            assert previous_end - 0.02 <= w.start <= w.end, (w, previous_end)
            assert 0 < w.probability <= 1
            previous_end = w.end
    assert segs[-1].end <= 44.4 + 0.02


def test_the_transcript_is_the_same_with_words_and_with_as2d(whisper, two_cities, words_of,
                                                           base_target_only):
    """Words change no token, and AS²D with words gives target-only's segments and word times
    (one speculative decoder: the verification kernel under it, which SD shares, is tested
    once in tests/test_kernel.py and SD itself on real clips in tests/test_as2d.py), on two
    windows: the second's words timed from its own start, after a prompt."""
    from as2d.runtime.transcribe.as2d import AS2D

    target = aligned_model(whisper)
    drafter = whisper("tiny.en", "int8", threads=1, role="drafter")
    # Without words: the session's target-only tokens of the same bundle (base int8, two
    # threads, English, greedy), which other modules compare with too.
    plain = base_target_only(two_cities)
    runs = {}
    # The target's own run with words is the module's (LongFormTranscriber's default decoder
    # is TargetOnly of the model); AS²D is decoded here.
    for name, decoder in [("target", None), ("as2d", AS2D(target, drafter))]:
        segs = (words_of(two_cities) if decoder is None
                else transcribe(target, two_cities, decoder, word_timestamps=True))
        assert [s.tokens for s in segs] == plain, name
        runs[name] = [(s.start, s.end, [(w.word, w.start, w.end) for w in s.words])
                      for s in segs]
    assert runs["as2d"] == runs["target"]


def test_word_times_agree_with_faster_whisper_on_the_same_weights(two_cities, words_of,
                                                                   tmp_path_factory):
    """On the clip the other tests read: about 120 words over two windows (the second's
    times from its own start), enough for the median and the tail of the differences."""
    import difflib
    import re

    faster_whisper = pytest.importorskip("faster_whisper")
    from helpers import ct2_folder

    peer = faster_whisper.WhisperModel(
        str(ct2_folder("base", tmp_path_factory.mktemp("ct2"))), device="cpu",
        compute_type="int8", cpu_threads=2)

    def norm(word):
        return re.sub(r"[^\w']", "", word.lower())

    ours = [w for s in words_of(two_cities) for w in s.words]
    segs, _ = peer.transcribe(str(two_cities), language="en", beam_size=1, temperature=0.0,
                              word_timestamps=True)
    theirs = [w for s in segs for w in s.words]
    sm = difflib.SequenceMatcher(a=[norm(w.word) for w in ours],
                                 b=[norm(w.word) for w in theirs], autojunk=False)
    paired = [(ours[b.a + k], theirs[b.b + k]) for b in sm.get_matching_blocks()
              for k in range(b.size)]
    assert len(paired) >= 0.9 * len(ours) >= 100
    diffs = [abs(a.start - b.start) for a, b in paired] + [abs(a.end - b.end) for a, b in paired]
    assert statistics.median(diffs) <= 0.04, f"median |Δ| {statistics.median(diffs):.3f} s"
    assert sorted(diffs)[int(0.9 * len(diffs))] <= 0.2


def test_a_model_without_alignment_heads_is_refused_before_decoding(whisper):
    from as2d.runtime.transcribe.transcribe_options import TranscribeOptions
    from as2d.runtime.whisper.alignment import AlignmentError, WordAligner

    class NoHeads:
        name, config, alignment_graph, threads = "hf-export", {}, None, 1  # declares none

    with pytest.raises(AlignmentError, match="cannot give word timestamps"):
        WordAligner.for_run(NoHeads(), "en", TranscribeOptions())
