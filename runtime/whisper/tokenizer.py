"""Whisper's tokenizer, read from the model's own ``tokenizer.json``.

Special token ids differ between Whisper's vocabularies, so every id is looked up by name in
the model's file; nothing is hard-coded (timestamps follow ``<|notimestamps|>``). Byte-pair
merging is done here by rank (a token's rank is its id, as in Whisper's tiktoken tokenizer), so
:class:`_Vocabulary` reads only the vocabulary, special tokens and pre-tokenizer (a whole
``tokenizers`` tokenizer cost 0.1 s of start-up per model, GIL held); a file of another shape is
read by ``tokenizers``.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from as2d.runtime.whisper.languages import LANGUAGE_NAMES, TO_LANGUAGE_CODE

TIME_PRECISION = 0.02  # seconds per timestamp token

_LANG_TOKEN = re.compile(r"^<\|([a-z]{2,3}|haw|yue)\|>$")


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-unicode table used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _byte_decoder()
# str.translate tables between a byte (as the latin-1 character of the same code) and the
# character that stands for it in a byte-level vocabulary, both ways.
_UNICODE_TO_BYTE = {ord(c): chr(b) for c, b in _BYTE_DECODER.items()}
# A character of U+0000-U+00FF outside the byte alphabet must not pass as its own byte: it is
# sent to the (slow, exact) fallback instead, which drops it.
_UNICODE_TO_BYTE.update({c: "\uffff" for c in range(256) if c not in _UNICODE_TO_BYTE})
_BYTE_TO_UNICODE = {b: c for c, b in _BYTE_DECODER.items()}


class _Vocabulary:
    """The parts of a byte-level BPE ``tokenizer.json`` that :class:`WhisperTokenizer` uses,
    with the calls it makes of a ``tokenizers.Tokenizer``."""

    def __init__(self, doc: dict) -> None:
        from tokenizers import pre_tokenizers

        self.vocab: dict[str, int] = doc["model"]["vocab"]
        self.added = {a["content"]: int(a["id"]) for a in doc.get("added_tokens", ())}
        cfg = doc["pre_tokenizer"]
        self.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=bool(cfg.get("add_prefix_space", False)),
            use_regex=bool(cfg.get("use_regex", True)))
        self._pieces: list[str | None] | None = None

    @staticmethod
    def fits(doc: dict) -> bool:
        """A plain byte-level BPE file (what Whisper's are)."""
        model, pre, dec = doc.get("model") or {}, doc.get("pre_tokenizer") or {}, \
            doc.get("decoder") or {}
        return (model.get("type") == "BPE" and isinstance(model.get("vocab"), dict)
                and not doc.get("normalizer") and pre.get("type") == "ByteLevel"
                and dec.get("type") == "ByteLevel" and not model.get("byte_fallback"))

    def token_to_id(self, token: str) -> int | None:
        tid = self.added.get(token)
        return tid if tid is not None else self.vocab.get(token)

    def id_to_token(self, tid: int) -> str | None:
        if self._pieces is None:
            pieces: list[str | None] = [None] * (max([*self.vocab.values(),
                                                      *self.added.values()]) + 1)
            for piece, i in self.vocab.items():
                pieces[i] = piece
            for piece, i in self.added.items():
                pieces[i] = piece
            self._pieces = pieces
        return self._pieces[tid] if 0 <= tid < len(self._pieces) else None

    def get_vocab(self, with_added_tokens: bool = False) -> dict[str, int]:
        return {**self.vocab, **self.added} if with_added_tokens else self.vocab

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return len(self.get_vocab(with_added_tokens))

    @cached_property
    def token_bytes(self) -> list[bytes]:
        """Raw bytes of every vocabulary id (byte-level pieces may split a UTF-8 character)."""
        table = [b""] * (max(self.vocab.values()) + 1)
        for piece, i in self.vocab.items():
            table[i] = _piece_bytes(piece)
        return table

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of vocabulary ids (the byte-level decoder: each character stands for a byte;
        invalid UTF-8 becomes U+FFFD, as ``tokenizers`` does)."""
        table = self.token_bytes
        return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


def _piece_bytes(piece: str) -> bytes:
    try:  # each character of a piece stands for one byte: mapped in C
        return piece.translate(_UNICODE_TO_BYTE).encode("latin-1")
    except UnicodeEncodeError:  # a character outside the byte alphabet: dropped
        return bytes(_BYTE_DECODER[c] for c in piece if c in _BYTE_DECODER)


def _load(path: Path):
    """The vocabulary of ``path`` (:class:`_Vocabulary`), or a ``tokenizers`` tokenizer for a
    file of another shape."""
    import json

    doc = json.loads(path.read_bytes())
    if _Vocabulary.fits(doc):
        return _Vocabulary(doc)
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


class WhisperTokenizer:
    def __init__(self, path: str | Path, n_vocab: int) -> None:
        self.path = Path(path)
        self.tok = _load(self.path)
        self.n_vocab = n_vocab

        def special(name: str, required: bool = True) -> int | None:
            tid = self.tok.token_to_id(name)
            if tid is None and required:
                raise ValueError(f"{self.path}: special token {name} is missing")
            return tid

        self.eot = special("<|endoftext|>")
        self.sot = special("<|startoftranscript|>")
        self.translate = special("<|translate|>")
        self.transcribe = special("<|transcribe|>")
        self.sot_lm = special("<|startoflm|>")
        self.sot_prev = special("<|startofprev|>")
        self.no_timestamps = special("<|notimestamps|>")
        self.no_speech = special("<|nospeech|>", False) or special("<|nocaptions|>", False)
        self.timestamp_begin = self.no_timestamps + 1
        self.languages: dict[str, int] = {}
        for tid in range(self.sot + 1, self.translate):
            m = _LANG_TOKEN.match(self.tok.id_to_token(tid) or "")
            if m:
                self.languages[m.group(1)] = tid
        # Whisper's English-only models have a vocabulary one shorter than the multilingual ones.
        self.multilingual = n_vocab >= 51865
        self._piece_cache: dict[str, tuple[int, ...]] = {}
        self._rank_cache: dict[bytes, int | None] = {}

    # -- prompts ------------------------------------------------------------------------------
    def sot_sequence(self, language: str | None, task: str = "transcribe") -> list[int]:
        if not self.multilingual:
            return [self.sot]
        seq = [self.sot]
        if language is not None:
            seq.append(self.language_token(language))
        seq.append(self.translate if task == "translate" else self.transcribe)
        return seq

    def language_token(self, language: str) -> int:
        code = normalize_language(language)
        if code not in self.languages:
            raise ValueError(f"language {language!r} is not in this model's vocabulary")
        return self.languages[code]

    # -- text ---------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Text → token ids exactly as Whisper's own (tiktoken) tokenizer makes them.

        The text is split into pre-tokens with the vocabulary's regex, and each pre-token is
        byte-pair merged by rank, where a token's rank is its id. The ``merges`` list shipped
        in some Whisper ``tokenizer.json`` files is incomplete (the multilingual one lacks the
        merge behind "Ġt", so " the" came out as " " + "the"); ranks do not depend on it.
        """
        out: list[int] = []
        for _, (a, b) in self.tok.pre_tokenizer.pre_tokenize_str(text):
            out.extend(self.encode_piece(text[a:b]))
        return out

    def encode_piece(self, piece: str) -> tuple[int, ...]:
        """One pre-token → ids (cached: speech repeats its words)."""
        cached = self._piece_cache.get(piece)
        if cached is None:
            cached = self._bpe(piece.encode("utf-8"))
            if len(self._piece_cache) > 1 << 16:
                self._piece_cache.clear()
            self._piece_cache[piece] = cached
        return cached

    def _bpe(self, data: bytes) -> tuple[int, ...]:
        rank = self._rank
        parts = [data[i : i + 1] for i in range(len(data))]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = rank(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at : at + 2] = [parts[at] + parts[at + 1]]
        return tuple(rank(p) for p in parts)

    def _rank(self, piece: bytes) -> int | None:
        """The rank (= id) of a byte string among the text tokens, None if it is none.

        Asked of the vocabulary, one piece at a time (and remembered): a run's first window
        needs only a few dozen pieces (the suppressed symbols), and building a table of all
        51k tokens first cost 70 ms alone, 0.4 s beside the drafter thread's own."""
        cache = self._rank_cache
        if piece not in cache:
            if len(cache) > 1 << 18:
                cache.clear()
            tid = self.tok.token_to_id(piece.decode("latin-1").translate(_BYTE_TO_UNICODE))
            cache[piece] = tid if tid is not None and tid < self.eot else None
        return cache[piece]

    def decode(self, ids) -> str:
        """Text of the text tokens in ``ids`` (special and timestamp tokens are skipped)."""
        return self.tok.decode([int(t) for t in ids if t < self.eot], skip_special_tokens=False)

    def decode_bytes(self, ids) -> bytes:
        table = self.token_bytes
        return b"".join(table[t] for t in ids if t < self.eot)

    @cached_property
    def token_bytes(self) -> list[bytes]:
        """Raw bytes of every text token (byte-level BPE pieces may split a UTF-8 character)."""
        if isinstance(self.tok, _Vocabulary):  # the table its decode uses, not a second one
            return (self.tok.token_bytes + [b""] * self.eot)[:self.eot]
        out = [b""] * self.eot
        for piece, tid in self.tok.get_vocab(with_added_tokens=False).items():
            if 0 <= tid < self.eot:
                out[tid] = _piece_bytes(piece)
        return out

    @cached_property
    def non_speech_tokens(self) -> list[int]:
        """Tokens for symbols and speaker tags that should never be transcribed.

        The same set Whisper suppresses by default: brackets, music notes and punctuation runs
        that stand for non-speech, taken both alone and with a leading space.
        """
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        misc = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(misc):
            for ids in (self.encode(symbol), self.encode(" " + symbol)):
                if len(ids) == 1 or symbol in misc:
                    result.add(ids[0])
        return sorted(result)

    def suppress_tokens(self) -> list[int]:
        """Whisper's default ``suppress_tokens=-1``: non-speech symbols and task tokens."""
        ids = set(self.non_speech_tokens)
        ids.update([self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm])
        if self.no_speech is not None:
            ids.add(self.no_speech)
        return sorted(ids)


def normalize_language(language: str) -> str:
    key = language.strip().lower()
    if key in LANGUAGE_NAMES:
        return key
    if key in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[key]
    raise ValueError(f"unknown language {language!r}")
