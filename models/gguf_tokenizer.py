"""A ``tokenizers`` tokenizer rebuilt from a GGUF's ``tokenizer.ggml.*`` metadata.

The GGUF carries SentencePiece's vocabulary (pieces, scores, token types) but no
``tokenizer.json``; the runtime wants one it can load without SentencePiece or llama.cpp, so
the install writes it from the metadata. The special ids go to the manifest
(:class:`TokenizerInfo`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from as2d.models.gguf_reader import GGUFError, GGUFModel

if TYPE_CHECKING:  # the `tokenizers` package is imported only when a tokenizer is built
    from tokenizers import Tokenizer

# GGUF token types (llama.cpp's llama_token_type)
(TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED,
 TOKEN_BYTE) = range(1, 7)


@dataclass(frozen=True)
class TokenizerInfo:
    """Special ids and flags from ``tokenizer.ggml.*`` (written to the manifest)."""

    bos_id: int
    eos_id: int
    unk_id: int
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    end_of_turn_id: int | None
    start_of_turn_id: int | None
    start_of_image_id: int | None


# Chat markup of the families: Gemma, ChatML (SmolLM, Qwen), Llama 3, Phi-3.
_END_OF_TURN = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>")
_START_OF_TURN = ("<start_of_turn>", "<|im_start|>", "<|start_header_id|>")


def _first(index: dict[str, int], names: tuple[str, ...]) -> int | None:
    return next((index[n] for n in names if n in index), None)


def tokenizer_info(m: GGUFModel) -> TokenizerInfo:
    """The special ids, by metadata key where the file has one, else by piece text."""
    tokens = m.require("tokenizer.ggml.tokens")
    index = {t: i for i, t in enumerate(tokens)}
    pad = m.meta("tokenizer.ggml.padding_token_id")
    return TokenizerInfo(
        bos_id=int(m.require("tokenizer.ggml.bos_token_id")),
        eos_id=int(m.require("tokenizer.ggml.eos_token_id")),
        unk_id=int(m.meta("tokenizer.ggml.unknown_token_id", index.get("<unk>", 0))),
        pad_id=None if pad is None else int(pad),
        add_bos=bool(m.meta("tokenizer.ggml.add_bos_token", True)),
        add_eos=bool(m.meta("tokenizer.ggml.add_eos_token", False)),
        end_of_turn_id=_first(index, _END_OF_TURN),
        start_of_turn_id=_first(index, _START_OF_TURN),
        start_of_image_id=index.get("<start_of_image>"),
    )


def spm_merges(tokens: list[str], scores: Iterable[float], types: Iterable[int]
               ) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-driven BPE over this vocabulary.

    SentencePiece merges, at each step, the adjacent pair whose concatenation is the
    highest-scoring normal piece. A rank-ordered merge list reproduces that when it holds every
    split ``(a, b)`` of every normal piece into two normal pieces, ranked by the score of
    ``a + b`` (then by its id), ties broken by the ids of the parts. Different splits of one
    piece can never compete for the same span, so the tie order does not change any result.
    """
    types = list(types)
    scores = list(scores)
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == TOKEN_NORMAL}
    found: list[tuple[float, int, int, int, str, str]] = []
    for piece, pid in normal.items():
        for cut in range(1, len(piece)):
            a, b = piece[:cut], piece[cut:]
            ia, ib = normal.get(a), normal.get(b)
            if ia is not None and ib is not None:
                found.append((-scores[pid], pid, ia, ib, a, b))
    found.sort()
    return [(a, b) for *_, a, b in found]


def build_tokenizer(m: GGUFModel) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to llama.cpp's SentencePiece-BPE tokenizer.

    * normal pieces form a BPE model whose merges follow the piece scores (:func:`spm_merges`),
      with byte fallback (``<0xNN>`` pieces) for characters outside the vocabulary;
    * spaces become ``▁``, and each run of text starts with one when ``add_space_prefix``
      (Llama 2, Phi-3; false for Gemma);
    * user-defined pieces (runs of newlines, spaces and tabs, a few HTML tags) are atomic and
      matched first, leftmost-longest, on the raw text, as SentencePiece's prefix matcher does
      (llama.cpp already stored their ``▁`` as real spaces);
    * control pieces (``<bos>``, ``<eos>``, ``<start_of_turn>``, ``<end_of_turn>``,
      ``<unusedN>``, …) are special tokens: never produced from ordinary text, skipped when
      decoding with ``skip_special_tokens``;
    * ``<bos>`` is prepended when the file says ``add_bos_token``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers

    model_kind = m.require("tokenizer.ggml.model")
    if model_kind == "gpt2":
        return build_bpe_tokenizer(m)
    if model_kind != "llama":
        raise GGUFError(f"tokenizer model {model_kind!r}; only SentencePiece ('llama') and "
                        "byte-level BPE ('gpt2') are handled")
    # A leading "▁" before every run of text (SentencePiece's dummy prefix: Llama 2, Phi-3).
    # llama.cpp's default when the key is missing is true; Gemma's converter writes false.
    arch = str(m.meta("general.architecture", ""))
    prefix = bool(m.meta("tokenizer.ggml.add_space_prefix", not arch.startswith("gemma")))
    tokens: list[str] = list(m.require("tokenizer.ggml.tokens"))
    types: list[int] = [int(t) for t in m.require("tokenizer.ggml.token_type")]
    info = tokenizer_info(m)
    scores = [float(x) for x in m.require("tokenizer.ggml.scores")]
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=spm_merges(tokens, scores, types),
                     unk_token=tokens[info.unk_id], byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(bpe)
    replace = normalizers.Replace(" ", "▁")
    # Prepend runs on each stretch of text between special pieces, as llama.cpp prefixes
    # each raw-text fragment; decoding keeps the space (a streamed answer needs it).
    tok.normalizer = (normalizers.Sequence([normalizers.Prepend("▁"), replace]) if prefix
                      else replace)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    _add_markup(tok, tokens, types)
    _add_bos(tok, tokens, info)
    return tok


def _add_markup(tok: Tokenizer, tokens: list[str], types: list[int]) -> None:
    """Control pieces become special tokens, user-defined ones atomic (non-special) tokens."""
    from tokenizers import AddedToken

    added = []
    for t, ty in zip(tokens, types):
        if ty == TOKEN_CONTROL:
            added.append(AddedToken(t, special=True, normalized=False))
        elif ty == TOKEN_USER_DEFINED:
            added.append(AddedToken(t, special=False, normalized=False))
    tok.add_tokens([a for a in added if not a.special])
    tok.add_special_tokens([a for a in added if a.special])


def _add_bos(tok: Tokenizer, tokens: list[str], info: TokenizerInfo) -> None:
    from tokenizers import processors

    if info.add_bos:
        bos = tokens[info.bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, info.bos_id)])


# llama.cpp's pre-tokenizer names (``tokenizer.ggml.pre``) → how text is split before BPE.
# "digits": each digit its own piece, then GPT-2's regex (SmolLM, StarCoder: as their
# tokenizer.json's Digits(individual) + ByteLevel); "gpt2": GPT-2's regex alone; the others
# split with their own expression and then map bytes without a regex.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_TOKENIZERS = {"smollm": "digits", "starcoder": "digits", "refact": "digits",
                   "gpt2": "gpt2", "default": "gpt2", "llama-bpe": _LLAMA3_SPLIT,
                   "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}


def build_bpe_tokenizer(m: GGUFModel) -> Tokenizer:
    """A byte-level BPE tokenizer (``tokenizer.ggml.model == "gpt2"``: SmolLM, Llama 3, Qwen)
    from the GGUF's vocabulary and merges, split as llama.cpp splits for the file's
    ``tokenizer.ggml.pre``; control pieces are special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    pre = str(m.meta("tokenizer.ggml.pre", "default"))
    split = _PRE_TOKENIZERS.get(pre)
    if split is None:
        raise GGUFError(f"byte-level BPE pre-tokenizer {pre!r} is not handled (known: "
                        f"{', '.join(sorted(_PRE_TOKENIZERS))})")
    tokens: list[str] = list(m.require("tokenizer.ggml.tokens"))
    types: list[int] = [int(t) for t in m.require("tokenizer.ggml.token_type")]
    merges = [tuple(x.split(" ", 1)) for x in m.require("tokenizer.ggml.merges")]
    info = tokenizer_info(m)
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    if split == "digits":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif split == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    _add_markup(tok, tokens, types)
    _add_bos(tok, tokens, info)
    return tok
