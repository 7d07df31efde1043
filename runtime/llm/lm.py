"""The answering LLM of ``as2d ask`` (Gemma 2/3, Llama, Qwen2/3, Phi-3 bundles): one
onnxruntime session, KV cache.

Shaped like :mod:`as2d.runtime.whisper.model` so that one speculative scheduler serves both: a
:class:`LLMState` owns a preallocated per-layer cache (``[capacity, kv_dim]`` float32 for keys
and for values), ``forward(tokens)`` runs any number of new tokens after the cached ones and
returns their logits, and ``truncate(n)`` drops rejected candidates by changing only the
length. The graph computes every token row independently of the others, so a verification pass
over ``k + 1`` tokens returns, bit for bit, the logits of ``k + 1`` single-token passes: greedy
speculative decoding gives exactly the text of plain greedy decoding.

The bundle (written by ``as2d.models.llm_install``) holds ``decoder.onnx``, ``tokenizer.json`` and a
manifest with the architecture (``config``), the cache capacity and the tokenizer's special ids.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from as2d.runtime.json_files import read_json_capped
from as2d.runtime.kvcache import KVCache, StatePool
from as2d.runtime.llm.lean_tokenizer import LeanTokenizer, open_lean, scan_newline_ids
from as2d.runtime.sessions import make_session

MAX_CAPACITY = 1 << 17  # tokens of KV cache a bundle may ask for (the manifest is untrusted)
PREFILL_CHUNK = 256  # prompt tokens per pass: bounds the [rows, S] attention scores in memory


@dataclass(frozen=True)
class LLMConfig:
    """The parts of the manifest's ``config`` that the runtime uses."""

    vocab_size: int
    num_layers: int
    kv_dim: int
    capacity: int


class TokenizerBase:
    """A ``tokenizers`` tokenizer with the model's special ids (``tok``, ``bos``, ``add_bos``
    set by the subclass), in the shape the answering pipeline uses."""

    tok: Tokenizer
    bos: int | None
    add_bos: bool
    # encode_special_tokens is a switch on the shared tokenizer: flipped for one call, under this
    # lock, and put back (a copy of Gemma's 262k-entry tokenizer would take 1.5 s to build).
    _switch = threading.Lock()
    _newlines: frozenset[int] | None = None

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, bos: bool | None = None) -> list[int]:
        """Token ids of ``text`` (control-token text becomes control tokens); ``bos`` defaults
        to the model's ``add_bos`` flag."""
        ids = self.encode_piece(text, literal=False)
        if (self.add_bos if bos is None else bos) and self.bos is not None:
            ids = [self.bos] + ids
        return ids

    def encode_piece(self, text: str, literal: bool) -> list[int]:
        """Ids of one piece of a prompt, no ``<bos>``; ``literal``: text that looks like a
        control token (``"<eos>"``) stays text (see :class:`as2d.runtime.ask.codec.Codec`)."""
        with TokenizerBase._switch:
            before = self.tok.encode_special_tokens
            self.tok.encode_special_tokens = literal
            try:
                return self.tok.encode(text, add_special_tokens=False).ids
            finally:
                self.tok.encode_special_tokens = before

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special)

    def token(self, tid: int) -> str | None:
        return self.tok.id_to_token(int(tid))

    def id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def newline_ids(self) -> frozenset[int]:
        """Every token whose text holds a line break: a one-line answer ends at any of them.
        (A scan of the vocabulary, once per tokenizer: 0.15 s for Gemma's.)"""
        if self._newlines is None:
            self._newlines = scan_newline_ids(self.tok)
        return self._newlines


class LLMTokenizer(TokenizerBase):
    """Gemma's SentencePiece-BPE tokenizer (built from the GGUF metadata at install time).

    ``encode`` prepends ``<bos>`` when asked (the model expects it at the start of a
    sequence); text that merely looks like a control token (``"<eos>"``) is encoded as that
    control token, as Gemma's own tokenizer does, so chat markup can be written as text.

    Encoding, decoding and look-ups go through :class:`LeanTokenizer` (milliseconds, from a
    store cached next to the file; same ids) when the file allows it; the full ``tokenizers``
    tokenizer (0.86 s of CPU to load) is then loaded only if ``tok`` is asked for.
    """

    def __init__(self, path: str | Path, info: dict) -> None:
        self.path = Path(path)
        self._full: Tokenizer | None = None
        self._full_lock = threading.Lock()
        self.lean: LeanTokenizer | None = open_lean(self.path, load_tokenizer)
        if self.lean is None:
            self._full = load_tokenizer(self.path)
        self.bos: int = int(info["bos_id"])
        self.eos: int = int(info["eos_id"])
        self.add_bos: bool = bool(info.get("add_bos", True))
        eot = info.get("end_of_turn_id")
        self.end_of_turn: int | None = None if eot is None else int(eot)
        sot = info.get("start_of_turn_id")
        self.start_of_turn: int | None = None if sot is None else int(sot)
        if self.token(self.bos) is None or self.token(self.eos) is None:
            raise ValueError(f"{self.path}: special ids do not match the tokenizer")

    @property
    def tok(self) -> Tokenizer:  # type: ignore[override]
        """The full ``tokenizers`` tokenizer, loaded on first use."""
        with self._full_lock:
            if self._full is None:
                self._full = load_tokenizer(self.path)
            return self._full

    @property
    def vocab_size(self) -> int:
        return self.lean.vocab_size if self.lean else super().vocab_size

    def encode_piece(self, text: str, literal: bool) -> list[int]:
        return self.lean.encode(text, literal) if self.lean else super().encode_piece(text,
                                                                                     literal)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.lean.decode(ids, skip_special) if self.lean else super().decode(
            ids, skip_special)

    def token(self, tid: int) -> str | None:
        return self.lean.token(int(tid)) if self.lean else super().token(tid)

    def id(self, token: str) -> int | None:
        return self.lean.id(token) if self.lean else super().id(token)

    def newline_ids(self) -> frozenset[int]:
        return self.lean.newline_ids if self.lean else super().newline_ids()


def load_tokenizer(path: Path) -> Tokenizer:
    """The full ``tokenizers`` tokenizer of ``path`` (0.8-1.1 s for Gemma's): what the lean
    store is built and checked with, and the fallback where it cannot be used."""
    return Tokenizer.from_file(str(path))


def check_chat_template(template: str, where: object) -> None:
    """Render a model's chat template once at load, in the bounded sandbox (a GGUF from
    anywhere is untrusted), so that a broken or hostile one is refused before anything is
    transcribed; raises ``ValueError`` with one line."""
    from as2d.runtime.llm.template import TemplateError, render_chat_template

    try:
        out = render_chat_template(template, messages=[{"role": "user", "content": "\x00Q\x00"}],
                                   add_generation_prompt=True, bos_token="", eos_token="")
    except TemplateError as exc:
        raise ValueError(f"{where}: its chat template cannot be rendered ({exc})") from None
    if "\x00Q\x00" not in out:
        raise ValueError(f"{where}: its chat template does not show the user's message")


ROW_CHECK_TEXT = "The quick brown fox jumps over the lazy dog. It was the best of times."


class LMBackend:
    """What every answering-model back end shares: recyclable cache states and chunked prefill
    (generation itself, greedy or speculative, is :mod:`as2d.runtime.ask.generate`'s, written
    once for every back end).

    A subclass sets ``stop_ids`` and implements :meth:`_new_state`; its states offer
    ``reset()``, ``forward(tokens, logit_rows)``, ``truncate(n)``, ``length`` and ``capacity``.
    """

    stop_ids: tuple[int, ...] = ()
    manifest: dict | None = None  # an as2d bundle's (a Hugging Face folder has none)

    def __init__(self) -> None:
        self._pool = StatePool()

    def _new_state(self):
        raise NotImplementedError

    def state(self):
        """An empty cache (recycled from :meth:`release` when one is free)."""
        state = self._pool.take(0, self._new_state)  # one shape: one sequence
        state.reset()
        return state

    def release(self, state) -> None:
        self._pool.give(0, state)

    chat_template: str | None = None  # a Hugging Face folder's (Jinja), rendered sandboxed
    trees: bool = False  # its graph takes tree passes (positions and a visibility matrix)
    row_check: dict | None = None  # as2d.runtime.rows' verdict, once checked
    row_memo = None  # where the verdict is remembered (a bundle: its models folder)

    def row_probe(self):
        """The passes of the row check (:mod:`as2d.runtime.rows`): a sentence's tokens one by
        one, at once, and in blocks after a truncation, as verification uses the cache."""
        ids = self.tokenizer.encode(ROW_CHECK_TEXT)[:16]
        return self.state, ids, self.release

    @property
    def lossless(self) -> bool:
        """May candidates be verified on this model (its passes are row-exact)?"""
        from as2d.runtime.rows import rows_exact

        return rows_exact(self)

    def prefill(self, state, prompt_ids: Sequence[int]) -> np.ndarray:
        """Run the prompt in chunks; returns the logits ``[V]`` of its last token only."""
        if not prompt_ids:
            raise ValueError("empty prompt (it should at least hold <bos>)")
        last = None
        for start in range(0, len(prompt_ids), PREFILL_CHUNK):
            last = state.forward(prompt_ids[start : start + PREFILL_CHUNK], logit_rows=1)
        return last[-1]


class CausalLM(LMBackend):
    """A decoder-only LLM bundle: one session, its tokenizer, and recyclable cache states."""

    def __init__(self, bundle_dir: str | Path, threads: int = 1, name: str | None = None) -> None:
        super().__init__()
        self.path = Path(bundle_dir)
        manifest = read_json_capped(self.path / "manifest.json")
        if not isinstance(manifest, dict):
            raise ValueError(f"{self.path / 'manifest.json'}: not a manifest")
        if manifest.get("kind") not in (None, "llm"):
            raise ValueError(f"{self.path}: not an LLM bundle (kind {manifest.get('kind')!r})")
        self.manifest = manifest
        self.name = name or manifest.get("name", self.path.name)
        cfg = manifest["config"]
        self.config = LLMConfig(vocab_size=int(cfg["vocab_size"]),
                                num_layers=int(cfg["num_layers"]),
                                kv_dim=int(cfg["num_kv_heads"]) * int(cfg["head_dim"]),
                                capacity=int(manifest["capacity"]))
        self.tokenizer = LLMTokenizer(self.path / manifest["files"]["tokenizer"],
                                      manifest["tokenizer"])
        self.bos = self.tokenizer.bos
        self.eos = self.tokenizer.eos
        self.end_of_turn = self.tokenizer.end_of_turn
        self.stop_ids: tuple[int, ...] = tuple(int(i) for i in manifest.get(
            "stop_ids", [self.eos]))
        template = manifest.get("chat_template")
        if isinstance(template, str) and template:
            self.chat_template = template
            check_chat_template(template, self.path)
        self.threads = threads
        # It runs alone (after the transcription), so its pool spins between operators: a
        # pass of the 270M model at a 400-token context, 25 -> 20 ms on two threads.
        self.session = make_session(self.path / manifest["files"]["decoder"], threads,
                                    spin=True)
        self._outputs = [o.name for o in self.session.get_outputs()]
        # Bundles before the tree inputs (LLM converter version 7) take positions from the
        # cache length.
        self.trees = "visible" in {i.name for i in self.session.get_inputs()}
        self._check_against_graph()

    def _check_against_graph(self) -> None:
        """The manifest's numbers against the graph's real inputs and outputs, and the
        tokenizer's ids against its vocabulary (ValueError naming the file and the field):
        caches are sized from the manifest, so a wrong layer count, width or capacity would
        fail deep in onnxruntime or allocate gigabytes."""
        mf, c = self.path / "manifest.json", self.config
        ins = {i.name: i.shape for i in self.session.get_inputs()}
        outs = {o.name: o.shape for o in self.session.get_outputs()}
        layers = sum(1 for n in ins if n.startswith("past_k_"))
        if layers != c.num_layers:
            raise ValueError(f"{mf}: config.num_layers is {c.num_layers} but the graph has "
                             f"{layers} layers; reinstall the model")
        width = (ins.get("past_k_0") or [None])[-1]
        if isinstance(width, int) and width != c.kv_dim:
            raise ValueError(f"{mf}: config.num_kv_heads × head_dim is {c.kv_dim} but the "
                             f"graph's cache is {width} wide; reinstall the model")
        vocab = (outs.get("logits") or [None])[-1]
        if isinstance(vocab, int) and vocab != c.vocab_size:
            raise ValueError(f"{mf}: config.vocab_size is {c.vocab_size} but the graph gives "
                             f"{vocab} logits; reinstall the model")
        trained = self.manifest["config"].get("trained_context")
        limit = trained if isinstance(trained, int) and trained > 0 else MAX_CAPACITY
        if not 0 < c.capacity <= min(limit, MAX_CAPACITY):
            raise ValueError(f"{mf}: capacity {c.capacity} is not a context this model has "
                             f"(1 to {min(limit, MAX_CAPACITY)}); reinstall the model")
        size = self.tokenizer.vocab_size
        if size > c.vocab_size:
            raise ValueError(f"{self.tokenizer.path} has {size} tokens but the model has "
                             f"{c.vocab_size} (another model's tokenizer?); reinstall the model")
        for tid in (self.bos, self.eos, self.end_of_turn, *self.stop_ids):
            if tid is not None and not 0 <= tid < min(size, c.vocab_size):
                raise ValueError(f"{mf}: token id {tid} (tokenizer / stop_ids) is outside the "
                                 f"vocabulary of {min(size, c.vocab_size)}; reinstall the model")

    @property
    def capacity(self) -> int:
        return self.config.capacity

    @property
    def row_memo(self):
        """Remembered in the models folder under the graph's sha256."""
        digest = self.manifest.get("sha256", {}).get(self.manifest["files"]["decoder"])
        return (self.path.parent, digest) if isinstance(digest, str) and digest else None

    def _new_state(self) -> LLMState:
        return LLMState(self)


class LLMState(KVCache):
    """One sequence's KV cache, preallocated to the bundle's capacity."""

    def __init__(self, model: CausalLM) -> None:
        c = model.config
        super().__init__(c.num_layers, c.capacity, c.kv_dim)
        self.model = model
        self._feed: dict[str, np.ndarray] = {}

    @property
    def trees(self) -> bool:
        """Whether :meth:`forward_tree` scores a tree in one pass."""
        return self.model.trees

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray:
        """Run ``tokens`` after the cached ones; returns logits ``[R, vocab]`` of the last
        ``R = logit_rows`` tokens (all of them by default, as verification needs)."""
        t = len(tokens)
        if t == 0:
            raise ValueError("no tokens to run")
        if logit_rows is not None and logit_rows < 1:
            raise ValueError("logit_rows must be at least 1")
        feed = self._feed
        feed["tokens"] = np.asarray(tokens, dtype=np.int64)
        feed["logit_rows"] = np.array([t if logit_rows is None else logit_rows], dtype=np.int64)
        if self.model.trees:
            feed["positions"] = np.arange(self.length, self.length + t, dtype=np.int64)
            feed["visible"] = np.tri(t, dtype=bool)
        return self._run(self.model.session, self.model._outputs, feed, t, "LLM")["logits"]

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Logits ``[T, vocab]`` of every node of a tree of continuations of the cache, in one
        pass: node ``i`` is ``tokens[i]``, the child of node ``parents[i]`` (``-1``: of the
        cached sequence; a parent comes before its children). The cache is left as it was.

        The tree's rows are not bit-identical to a sequence pass (see
        :mod:`as2d.models.gemma_graph`); they rank continuations and commit nothing."""
        if not self.model.trees:
            raise ValueError(f"{self.model.name}: its graph predates tree passes")
        t = len(tokens)
        if t == 0 or len(parents) != t:
            raise ValueError("a tree needs one parent per token")
        depth, visible = tree_layout(parents)
        feed = {"tokens": np.asarray(tokens, dtype=np.int64),
                "positions": depth + self.length, "visible": visible,
                "logit_rows": np.array([t], dtype=np.int64)}
        self.feed_past(feed, t, "LLM")
        return self.model.session.run(["logits"], feed)[0]


def tree_layout(parents: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each node's depth (0 for a child of the cached sequence) and the ``[T, T]`` matrix of
    what it sees (itself and its ancestors), from parent indices that precede their nodes."""
    t = len(parents)
    depth = np.zeros(t, dtype=np.int64)
    visible = np.eye(t, dtype=bool)
    for i, p in enumerate(parents):
        p = int(p)
        if p >= i or p < -1:
            raise ValueError(f"node {i}: its parent {p} does not come before it")
        if p >= 0:
            depth[i] = depth[p] + 1
            visible[i] |= visible[p]
    return depth, visible
