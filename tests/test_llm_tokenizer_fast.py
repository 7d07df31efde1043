"""The lean Gemma tokenizer (small exact tokenizers built per text from a cached store).

Its one promise is exactness: for every text, in both of the Codec's modes (user text literal,
our markup with control tokens), the same ids as the full ``tokenizers`` tokenizer, and for every
id list the same decoded text. Answers are checked token for token against plain greedy
decoding, so any id difference would be a bug. The full tokenizer appears here only, as the
reference: on the real Gemma bundle (prompts the pipeline builds, random nasty text, random id
lists, every piece, its store as written beside the bundle), and on a small tokenizer of the
same structure for the fast lane (the structures the lean path takes, and the store file's
life: written once, reused, refused when damaged, rebuilt).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from as2d.runtime.ask.answer_sources import source_texts
from as2d.runtime.ask.codec import Codec
from as2d.runtime.ask.english.extract import candidates
from as2d.runtime.ask.prompt import STYLES, PromptBuilder
from as2d.runtime.ask.spans import Span, transcript_lines
from as2d.runtime.llm import lean_tokenizer
from as2d.runtime.llm.lean_tokenizer import (
    LeanTokenizer,
    build_store,
    lean_store_path,
    open_lean,
)
from as2d.runtime.llm.lm import LLMTokenizer, TokenizerBase
from as2d.runtime.llm.vocab_store import VocabStore, unsupported
from bench.questions import QUESTIONS, load_questions

MODEL = "gemma-3-270m"

# Text drawn from here is meant to hurt: control-token look-alikes, runs of spaces, tabs and
# line breaks (Gemma has added tokens for runs up to 31), "▁" itself (the normalised space),
# byte-piece look-alikes, combining marks, ZWJ emoji, CJK, characters outside the vocabulary
# (byte fallback), control characters.
FRAGMENTS = [" ", "  ", "   ", " " * 33, "▁", "▁▁", " ▁", "\t", "\t\t", "\t" * 35, "\n", "\n\n",
             "\n" * 32, "\r\n", "\r", "<", ">", "</", "eos", "<eos>", "<bos>", "<pad>", "<unk>",
             "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<unused0>",
             "<unused6241>", "<td>", "</table>", "<h1>", "[multimodal]", "0x", "<0x0A>",
             "<0xFF>", "<0x", "Ċ", "é", "e\u0301", "\u0301", "\u0301\u0301", "naïve", "東京",
             "日本語", "🙂", "👩\u200d👩\u200d👧", "\u200d", "\u200b", "\ufeff", "\x00", "\x07",
             "\x1b", "\U00030000", "\U0010fffd", "\ue000", "the", "The", "▁the", " the", "ing",
             "Mr.", "[0:07]", "Question:", "Answer:", "Transcript:\n", "3,14", "—", "…", "’"]
CHARS = st.characters(exclude_categories=("Cs",))
NASTY = st.lists(st.one_of(st.sampled_from(FRAGMENTS), CHARS, st.text(CHARS, max_size=6)),
                 max_size=40).map("".join)
RUNS = st.lists(st.sampled_from([" ", "\t", "\n", "▁", "a", "<eos>", "<", "é"]),
                max_size=120).map("".join)

# Transcripts of the question set's clips where their words are known without transcribing:
# the LibriVox reading (samples/README.md), the two espeak-ng texts, and Dickens' opening.
SENSE = ("and mister john dashwood had then leisure to consider how much there might be "
         "prudently in his power to do for them. he was not an ill disposed young man unless to "
         "be rather cold hearted and rather selfish is to be ill disposed. had he married a more "
         "amiable woman he might have been made still more respectable than he was. he might "
         "even have been made amiable himself.")
CITIES = ("It was the best of times, it was the worst of times, it was the age of wisdom, it "
          "was the age of foolishness, it was the epoch of belief, it was the epoch of "
          "incredulity, it was the season of Light, it was the season of Darkness, it was the "
          "spring of hope, it was the winter of despair.")


def reference_ids(full: Tokenizer, text: str, literal: bool) -> list[int]:
    full.encode_special_tokens = literal
    try:
        return full.encode(text, add_special_tokens=False).ids
    finally:
        full.encode_special_tokens = False


class FullTokenizer(TokenizerBase):
    """The plain path (the full tokenizer) with Gemma's special ids: the prompts' reference."""

    def __init__(self, full: Tokenizer, like: LLMTokenizer) -> None:
        self.tok = full
        self.bos, self.eos, self.add_bos = like.bos, like.eos, like.add_bos


def plan_outcome(builder: PromptBuilder, spans: list[Span], question: str, budget: int):
    plan = builder.plan(spans, question, budget)
    return plan.ids, plan.stop_ids, plan.text, plan.selected, plan.transcript_tokens


def spans_of(text: str) -> list[Span]:
    parts = [p.strip() + "." for p in text.replace("!", ".").split(".") if p.strip()]
    return [Span(3.0 * i, 3.0 * i + 2.5, p) for i, p in enumerate(parts)]


# ---------------------------------------------------------------------------------------------
# fixtures: the real Gemma tokenizer, lean and full
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemma(bundle) -> tuple[Path, dict]:
    path = bundle(MODEL, "int8")
    return path / "tokenizer.json", json.loads((path / "manifest.json").read_text())["tokenizer"]


@pytest.fixture(scope="module")
def full(gemma) -> Tokenizer:
    return Tokenizer.from_file(str(gemma[0]))


@pytest.fixture(scope="module")
def tok(gemma) -> LLMTokenizer:
    t = LLMTokenizer(*gemma)
    assert t.lean is not None, "Gemma's bundle takes the lean path"
    return t


@pytest.fixture(scope="module")
def store(tok) -> VocabStore:
    return tok.lean.store


def assert_same_ids(lean: LeanTokenizer, full: Tokenizer, text: str) -> None:
    for literal in (True, False):
        assert lean.encode(text, literal) == reference_ids(full, text, literal), (text, literal)


# ---------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------

def test_prompts_the_pipeline_builds_have_identical_ids(tok, full):
    """Every tenth question of bench/ask_questions.json (the set's question shapes repeat; the
    suite's time is bounded), in every few-shot style, over the known transcripts: the prompt's
    ids and stop ids, every piece it encodes, the transcript lines, the candidate answers and
    the look-up sources."""
    qset = load_questions()
    clips = json.loads(QUESTIONS.read_text())["clips"]
    texts = {"sense": SENSE, "two_cities": CITIES, "market": clips["market"]["espeak"],
             "trip": clips["trip"]["espeak"]}
    ref = FullTokenizer(full, tok)
    pieces: set[tuple[str, bool]] = set()
    for style in STYLES:
        if style == "instruct":
            continue
        ours, theirs = PromptBuilder(Codec(tok), style), PromptBuilder(Codec(ref), style)
        for q in qset.questions[::10]:
            spans = spans_of(texts.get(q.clip, SENSE) + " " + CITIES)
            # the whole transcript, then passages of it (the reference's plans, each made once)
            want = {4000: plan_outcome(theirs, spans, q.question, 4000)}
            cut = len(want[4000][0]) - 40
            want[cut] = plan_outcome(theirs, spans, q.question, cut)
            for budget, outcome in want.items():
                a = plan_outcome(ours, spans, q.question, budget)
                assert a == outcome, (style, q.id)
                assert budget == 4000 or a[3], "passages were selected"
            timed = ours.timed(q.question)
            pieces.update(ours.render(transcript_lines(spans, timed), q.question, timed))
            pieces.update(("\n" + transcript_lines([s], timed), True) for s in spans)
            pieces.update((" " + c.text, True) for c in candidates(spans, q.question))
            pieces.update((t, True) for t in source_texts(
                spans, q.question, texts.get(q.clip, SENSE).upper(), ours.examples_text(timed),
                timed).values())
    fresh = LeanTokenizer(tok.lean.store)
    for text, literal in sorted(pieces):
        want = reference_ids(full, text, literal)
        assert tok.encode_piece(text, literal) == want, text
        assert fresh.encode(text, literal) == want, text
        assert LeanTokenizer(tok.lean.store).encode(text, literal) == want, text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=NASTY)
def test_random_nasty_text_has_identical_ids(store, full, text):
    # A fresh lean tokenizer holds only this text's pieces: the minimal case of the claim.
    assert_same_ids(LeanTokenizer(store), full, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=RUNS)
def test_runs_of_spaces_tabs_and_breaks_have_identical_ids(store, full, text):
    assert_same_ids(LeanTokenizer(store), full, text)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(NASTY, min_size=1, max_size=6))
def test_a_grown_tokenizer_keeps_every_earlier_text_identical(store, full, texts):
    lean = LeanTokenizer(store)
    for t in texts:
        assert_same_ids(lean, full, t)
    for t in texts:  # now encoded by a tokenizer holding the others' pieces too
        assert_same_ids(lean, full, t)


def test_extra_pieces_change_no_ids(store, full):
    """Hash collisions can only add pieces that do not occur: harmless, as here with 20,000
    random ones (and their merges, when their parts are present)."""
    lean = LeanTokenizer(store)
    lean._seen[np.random.default_rng(0).integers(0, store.size, 20000)] = True
    for text in FRAGMENTS + [SENSE, CITIES, "".join(FRAGMENTS)]:
        assert_same_ids(lean, full, text)


def test_edge_texts(tok, full):
    lean = tok.lean
    for text in ["", " ", "▁", "\n", "<eos>", "<eos", "eos>", "<<eos>>", "<start_of_turn>",
                 " " * 31, " " * 32, " " * 100, "\n" * 31, "\n" * 64, "\t" * 70, "\U00030000",
                 "a\U00030000b", "\x00", "🙂" * 9, "e" + "\u0301" * 20]:
        assert_same_ids(LeanTokenizer(lean.store), full, text)
    assert tok.encode("") == [tok.bos] and tok.encode("", bos=False) == []
    for bad in ("a\ud800b", b"bytes"):  # the same refusal as the full tokenizer
        with pytest.raises(TypeError):
            full.encode(bad)
        with pytest.raises(TypeError):
            lean.encode(bad)


def test_text_longer_than_a_hashing_block(store, full):
    """Pieces that straddle the 65,536-character blocks the store hashes text in."""
    block = 1 << 16
    prose = (SENSE + " " + CITIES + "\n") * (block // len(SENSE) + 2)
    for cut in (block - 1, block - 5, block - 20):
        text = prose[:cut] + "<start_of_turn>" + " " * 31 + "\n" * 31 + "naïve 東京" + prose
        assert_same_ids(LeanTokenizer(store), full, text)


def test_threads_share_one_tokenizer(gemma, full):
    tok = LLMTokenizer(*gemma)
    texts = [f"{f} {SENSE[i * 7:i * 7 + 40]} <eos>" for i, f in enumerate(FRAGMENTS)]
    want = {(t, lit): reference_ids(full, t, lit) for t in texts for lit in (True, False)}
    errors = []

    def work(k: int) -> None:
        for i, t in enumerate(texts):
            lit = (i + k) % 2 == 0
            if tok.encode_piece(t, lit) != want[t, lit]:
                errors.append((t, lit))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


# ---------------------------------------------------------------------------------------------
# decoding, pieces, newline ids
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def byte_ids(full) -> list[int]:
    return [full.token_to_id(f"<0x{b:02X}>") for b in range(256)]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_id_lists_decode_identically(tok, full, byte_ids, data):
    v = full.get_vocab_size(with_added_tokens=True)
    utf8 = st.text(CHARS, max_size=4).map(lambda s: [byte_ids[b] for b in s.encode()])
    chunk = st.one_of(
        st.lists(st.integers(0, 400), max_size=4),  # control, unused, added runs, bytes
        st.lists(st.sampled_from(byte_ids), max_size=5),  # mostly invalid UTF-8
        utf8,  # valid UTF-8 as byte pieces
        utf8.map(lambda ids: ids[:-1]),  # cut short
        st.lists(st.integers(v - 64, v + 64), max_size=4),  # the vocabulary's end, and past it
        st.lists(st.integers(0, v - 1), max_size=4))
    ids = [i for c in data.draw(st.lists(chunk, max_size=8)) for i in c]
    for skip in (True, False):
        assert tok.decode(ids, skip) == full.decode(ids, skip_special_tokens=skip), ids


def test_decode_of_encoded_text_and_odd_ids(tok, full):
    ids = tok.encode("<start_of_turn>user\nnaïve \U00030000 café<end_of_turn>")
    for skip in (True, False):
        assert tok.decode(ids, skip) == full.decode(ids, skip_special_tokens=skip)
        assert tok.decode(np.array(ids), skip) == full.decode(ids, skip_special_tokens=skip)
    assert tok.decode([]) == full.decode([]) == ""
    with pytest.raises(OverflowError):
        full.decode([-1])
    with pytest.raises(OverflowError):
        tok.decode([-1])


def test_every_piece_and_id_lookup(tok, full):
    v = full.get_vocab_size(with_added_tokens=True)
    assert tok.vocab_size == v
    assert [tok.token(i) for i in range(v)] == [full.id_to_token(i) for i in range(v)]
    assert tok.token(v) is None and tok.token(v + 10**6) is None
    sample = list(range(0, 600)) + list(range(v - 300, v)) + list(
        np.random.default_rng(1).integers(0, v, 5000))
    for i in sample:
        piece = full.id_to_token(int(i))
        assert tok.id(piece) == full.token_to_id(piece) == i
    for missing in ("", "not a piece at all", "<eos >", "▁" * 40, " " * 32):
        assert tok.id(missing) == full.token_to_id(missing)


def test_newline_ids_equal_the_vocabulary_scan(tok, full):
    scan = set()
    for i in range(full.get_vocab_size(with_added_tokens=True)):
        piece = full.id_to_token(i)
        if piece and ("\n" in piece or piece == "<0x0A>" or "Ċ" in piece):
            scan.add(i)
    assert tok.newline_ids() == frozenset(scan)
    assert Codec(tok).newline_ids() == frozenset(scan)


@pytest.mark.usefixtures("tok")  # the module's tokenizer of the bundle: its store is written
def test_the_lean_path_never_loads_the_full_tokenizer(gemma, full):
    """Another tokenizer of the bundle reads the store the first wrote beside it (Gemma's
    store, written and read back: the same ids as the full tokenizer), and never loads the full
    tokenizer unless asked for it."""
    assert lean_store_path(gemma[0]).exists()
    tok = LLMTokenizer(*gemma)  # from the store the bundle now holds
    assert_same_ids(tok.lean, full, SENSE + " <start_of_turn>user\n<eos>\n\n  " + CITIES)
    plan = PromptBuilder(Codec(tok)).plan(spans_of(CITIES), "What was the age of?", 3000)
    assert tok.decode(plan.ids) and tok.token(5) and tok.id("<eos>") == tok.eos
    assert tok.newline_ids() and tok.vocab_size == full.get_vocab_size(True)
    assert tok._full is None
    assert tok.tok.get_vocab_size(True) == full.get_vocab_size(True)  # loaded when asked for


# ---------------------------------------------------------------------------------------------
# the store next to tokenizer.json
# ---------------------------------------------------------------------------------------------

class Loads:
    """A ``load_full`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: Path) -> Tokenizer:
        self.calls += 1
        return Tokenizer.from_file(str(path))


def test_store_is_written_once_reused_and_rebuilt_when_damaged(small, tmp_path, monkeypatch):
    """Built and written on first use, then read instead of the full load (meeting, the first
    time, the stores of an earlier version of the file); damaged, refused by its CRC and
    rebuilt; a rebuilt store that cannot be written (a full disk) is still used. On the small
    tokenizer of Gemma's shape, whose store is laid out as Gemma's: the file's life does not
    depend on the vocabulary's size, and each build of Gemma's costs seconds (Gemma's own
    store, as written beside the bundle and read back, is
    test_the_lean_path_never_loads_the_full_tokenizer's)."""
    path, full = small
    src = tmp_path / "tokenizer.json"
    shutil.copyfile(path, src)
    # A changed source gets a new store: a valid store named for the file as it was (and the
    # "fast" JSON form of the full tokenizer that earlier releases wrote beside it) is neither
    # read nor kept
    earlier = lean_store_path(src)
    st_ = src.stat()
    os.utime(src, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    cache = lean_store_path(src)
    assert cache != earlier
    build_store(path, Loads())[0].save(earlier)
    stale_fast = tmp_path / ".tokenizer.v1-33250687-1796121068345549450.fast.json"
    stale_fast.write_text("{}")
    load = Loads()
    assert open_lean(src, load) is not None and cache.exists() and load.calls == 1
    assert [p.name for p in tmp_path.glob(".tokenizer.lean*")] == [cache.name]
    assert not stale_fast.exists()
    again = open_lean(src, load)
    assert again is not None and load.calls == 1, "the store is read, the full load skipped"
    assert_same_ids(again, full, "the then abc <start_of_turn>  a\n\nb<eos> é")
    # damaged in the middle of its arrays: refused by the CRC, rebuilt, never used; and the
    # rebuilt store cannot be written (a full disk): used all the same, nothing left behind
    written = cache.read_bytes()
    data = bytearray(written)
    data[len(data) // 2] ^= 0x40  # (the hash table's buckets: most of the file)
    cache.write_bytes(bytes(data))
    with pytest.raises(ValueError):
        VocabStore.load(cache)

    def refuse(self, path):
        raise PermissionError(path)

    monkeypatch.setattr(VocabStore, "save", refuse)
    rebuilt = open_lean(src, load)
    assert rebuilt is not None and load.calls == 2 and not cache.exists()
    assert_same_ids(rebuilt, full, " ▁▁ <e<td>abc then 🙂")
    header = bytearray(written)
    header[60] ^= 0x01  # inside the JSON header (meta): as refused as a flip in the arrays
    for damage in (header, data[:1000], b"", b"as2d-tokenizer-store\n" + b"\xff" * 64):
        cache.write_bytes(bytes(damage))
        with pytest.raises(Exception):  # noqa: B017 - any refusal will do
            VocabStore.load(cache)


def test_read_only_folder_uses_the_full_tokenizer(gemma, full, tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    src = folder / "tokenizer.json"
    shutil.copyfile(gemma[0], src)
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root ignores the mode: say it as the OS would
            monkeypatch.setattr(lean_tokenizer.os, "access", lambda p, mode: False)
        tok = LLMTokenizer(src, gemma[1])
        assert tok.lean is None
        assert not list(folder.glob(".tokenizer.lean*"))
        ids = tok.encode("<start_of_turn>user\n" + SENSE)
        assert ids == [tok.bos] + reference_ids(full, "<start_of_turn>user\n" + SENSE, False)
        assert Codec(tok).text("<eos>") == reference_ids(full, "<eos>", True)
        assert tok.decode(ids) == full.decode(ids)
    finally:
        folder.chmod(0o755)


# ---------------------------------------------------------------------------------------------
# structure: what the lean path accepts (fast lane, on a small tokenizer of Gemma's shape)
# ---------------------------------------------------------------------------------------------

def small_tokenizer() -> Tokenizer:
    """Gemma's structure in miniature: ' ' -> '▁', BPE with byte fallback, added tokens."""
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["\n", "\n\n", "  ", "   ", "<start_of_turn>", "<td>"]
    words = ["▁", "a", "b", "c", "t", "h", "e", "n", "<", ">", "é", "ab", "abc", "▁a", "▁ab",
             "th", "the", "▁the", "▁t", "en", "then", "▁then", "▁▁", "<e"]
    pieces += words
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [("a", "b"), ("t", "h"), ("th", "e"), ("▁", "a"), ("▁", "t"), ("e", "n"),
              ("▁a", "b"), ("ab", "c"), ("the", "n"), ("▁", "the"), ("▁", "then"), ("▁", "▁"),
              ("<", "e"), ("▁", "ab")]  # "▁ab" twice: two merges make one piece
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.add_tokens([AddedToken(t, normalized=False) for t in ("\n", "\n\n", "  ", "   ",
                                                              "<td>")])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>")])
    return tok


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, Tokenizer]:
    path = tmp_path_factory.mktemp("small") / "tokenizer.json"
    small_tokenizer().save(str(path))
    return path, Tokenizer.from_file(str(path))


def test_small_tokenizer_of_the_same_shape_is_accepted_and_exact(small):
    path, full = small
    lean = open_lean(path, Loads())
    assert lean is not None and lean_store_path(path).exists()
    for text in ["the then abc", "<start_of_turn>  a\n\nb<eos>", "xyz é 東 🙂", " ▁ ▁▁  ",
                 "<e<td>"]:
        assert_same_ids(LeanTokenizer(lean.store), full, text)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(text=st.lists(st.sampled_from(["a", "b", "c", "t", "h", "e", "n", " ", "▁", "\n", "<",
                                      ">", "é", "x", "<eos>", "<td>", "<start_of_turn>", "🙂"]),
                     max_size=30).map("".join))
def test_small_tokenizer_random_text(small, text):
    path, full = small
    lean = open_lean(path, Loads())
    assert_same_ids(LeanTokenizer(lean.store), full, text)
    for skip in (True, False):
        ids = reference_ids(full, text, False)
        assert lean.decode(ids, skip) == full.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("edit,reason", [
    (lambda d: d.__setitem__("pre_tokenizer", {"type": "Whitespace"}), "pre-tokenizer"),
    (lambda d: d.__setitem__("normalizer", {"type": "NFKC"}), "normalizer"),
    (lambda d: d["model"].__setitem__("dropout", 0.1), "dropout"),
    (lambda d: d["model"].__setitem__("ignore_merges", True), "ignore_merges"),
    (lambda d: d["added_tokens"][0].__setitem__("normalized", True), "added token"),
    (lambda d: (d["model"]["vocab"].__setitem__("<0x41><0x42>", len(d["model"]["vocab"])),
                d["model"]["merges"].append(["<0x41>", "<0x42>"])), "merge"),
    (lambda d: d["model"]["vocab"].__setitem__("zz", 10**6), "vocabulary ids"),
    (lambda d: d.__setitem__("truncation", {"max_length": 8, "strategy": "LongestFirst",
                                            "stride": 0, "direction": "Right"}), "truncation"),
])
def test_other_structures_are_left_to_the_full_tokenizer(small, edit, reason):
    doc = json.loads(small[0].read_text())
    assert unsupported(doc) is None
    edit(doc)
    assert reason in unsupported(doc)


def test_an_unsupported_file_is_noted_and_then_skipped(tmp_path):
    tok = small_tokenizer()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    load = Loads()
    assert open_lean(path, load) is None
    assert lean_store_path(path).with_suffix(".unsupported").read_text().startswith("a pre-")
    assert open_lean(path, load) is None and load.calls == 0  # the note spares the parse
    store, reason = build_store(path, load)
    assert store is None and "pre-tokenizer" in reason
