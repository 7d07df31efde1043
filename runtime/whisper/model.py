"""A Whisper model: an encoder (onnxruntime or OpenVINO, see :mod:`.encoders`) and an
onnxruntime decoder, shaped for speculative decoding.

``encode`` runs once per window and returns the cross-attention keys/values of every decoder
layer. A :class:`DecoderState` owns one window's self-attention cache, preallocated to the
text context (448 positions) so that appending is a slice assignment and dropping rejected
tokens is only a change of length. ``forward`` takes any number of new tokens and returns
their logits: one token for plain decoding, ``k + 1`` for verification.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from as2d.runtime.json_files import read_json_capped
from as2d.runtime.kvcache import KVCache, PooledCache, StatePool
from as2d.runtime.sessions import Background, make_session, shared_tables, takes_optional
from as2d.runtime.whisper.cross import CrossForm, CrossQuantiser
from as2d.runtime.whisper.encoders import make_encoder
from as2d.runtime.whisper.tokenizer import WhisperTokenizer

# The row check's words (after the start-of-transcript tokens): more tokens than the widest
# pass the adaptive budget verifies (16 candidates and the token before them), so that pass's
# shape is among those probed.
ROW_PROBE_WORDS = (" a test of rows, one by one and then all of them at once, in one pass as"
                   " wide as the widest that verification runs")


@dataclass(frozen=True)
class WhisperDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int


@dataclass
class AudioContext:
    """Cross-attention keys/values of one encoded window."""

    cross: dict[str, np.ndarray]
    n_frames: int  # mel frames that were encoded (3000 for a full window)


class WhisperModel:
    """Encoder and decoder sessions of one bundle, plus its tokenizer and rules config."""

    def __init__(self, bundle_dir: str | Path, threads: int = 1,
                 encoder_threads: int | None = None, name: str | None = None,
                 role: str = "target", encoder: str | None = None,
                 progress: Callable[[str], None] | None = None,
                 ov_graph: Callable[[str], Path] | None = None, spin: bool = False,
                 alignment_graph: Callable[[], Path] | None = None) -> None:
        self.path = Path(bundle_dir)
        manifest = read_json_capped(self.path / "manifest.json")
        self.manifest = manifest
        self.name = name or manifest.get("name", self.path.name)
        try:
            self.dims = WhisperDims(**manifest["dims"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{self.path / 'manifest.json'}: dims is not a Whisper model's "
                             f"({exc}); reinstall the model") from None
        # A drafter's outputs are only proposals: it may use the faster, not row-exact decoder.
        files = manifest["files"]
        self._decoder_file = files.get("decoder_draft" if role == "drafter" else "decoder",
                                       files["decoder"])
        # The decoder session is built on a thread of its own (without the GIL) while the
        # tokenizer and the encoder load. ``spin``: the sessions have the cores to themselves.
        self.spin = spin
        # One mapping of the token table for every decoder graph of the bundle (the batched
        # and alignment graphs read the same one: as2d.runtime.sessions.shared_tables).
        self.tables = shared_tables(self.path, manifest,
                                    (self.dims.n_vocab, self.dims.n_text_state))
        decoder = Background(make_session, self.path / self._decoder_file, threads, spin,
                             self.tables)
        self.tokenizer = WhisperTokenizer(self.path / "tokenizer.json", self.dims.n_vocab)
        self.config = manifest.get("generation", {})
        self.threads = threads
        # The encoder back end (as2d.runtime.whisper.encoders); ``ov_graph(kind)`` makes an
        # OpenVINO graph a bundle lacks.
        self.encoder = make_encoder(self.path, manifest, encoder_threads or threads, encoder,
                                    ov_graph=ov_graph, warn=progress, spin=spin,
                                    name=manifest.get("model", self.name))
        mel_dim = self.encoder.mel_bands
        if mel_dim is not None and mel_dim != self.dims.n_mels:
            self.encoder = None  # freed now: its threads must not outlive the error
            try:  # nor may the decoder session still being built (an abort at exit)
                decoder.result()
            except Exception:  # noqa: BLE001 - the mismatch is the error to report
                pass
            raise ValueError(f"{self.name}: the manifest says n_mels {self.dims.n_mels} but the "
                             f"encoder takes {mel_dim} mel bands; reinstall the model")
        self.encoder_choice = self.encoder.choice
        self.encoder_name = self.encoder_choice.describe()
        self.decoder = decoder.result()
        check_against_graphs(self.path, self.dims, self.config, self.decoder,
                             self._decoder_file, self.tokenizer)
        # How every graph of the bundle reads the window's keys and values (.cross).
        self.cross_form = CrossForm.of(self.decoder)
        self._quantiser = CrossQuantiser(encoder_threads or threads)
        self._outputs = [o.name for o in self.decoder.get_outputs()]
        # Whether the decoder computes the logits of only the rows asked for (bundles made
        # before it compute every row's; forward keeps the ones asked for either way).
        self.logit_rows = takes_optional(self.decoder, "logit_rows")
        self._lock = threading.Lock()
        # Window states, single-row and pooled alike, kept for the next window.
        self._states = StatePool()
        # What the model can do besides greedy decoding, declared from the bundle: the batched
        # decoder (beam search, samples side by side) and the alignment graph (word timestamps;
        # else made on first use by ``alignment_graph()``).
        beam = files.get("decoder_beam")
        self.beam_graph: Path | None = self.path / beam if beam else None
        aligned = files.get("alignment")
        self.alignment_graph: Path | Callable[[], Path] | None = (
            self.path / aligned if aligned else alignment_graph)
        self._alignment_session = None  # made on first use (word timestamps)
        self._beam_session = None  # made on first use (beam search, a fallback's samples)
        self.beam_logit_rows = False  # whether it takes logit_rows (known with the session)

    @property
    def multilingual(self) -> bool:
        return self.tokenizer.multilingual

    row_check: dict | None = None  # as2d.runtime.rows' verdict, once checked

    def _probe_context(self) -> AudioContext:
        """One second of silence: the audio of the row checks."""
        return self.encode(np.zeros((1, self.dims.n_mels, 100), np.float32))

    def row_probe(self):
        """The passes of the row check (:mod:`as2d.runtime.rows`) over one second of silence (a
        new onnxruntime or CPU could round differently)."""
        return row_probe(self, self._probe_context())

    @property
    def row_memo(self):
        """Remembered in the models folder under the decoder graph's sha256."""
        return self._memo(self._decoder_file)

    def _memo(self, file: str | None):
        """Where a verdict on the bundle's graph ``file`` is remembered: the models folder and
        the graph's sha256 (None: a graph without one, checked on every load)."""
        digest = self.manifest.get("sha256", {}).get(file)
        return (self.path.parent, digest) if isinstance(digest, str) and digest else None

    def encode(self, mel: np.ndarray, run_options=None) -> AudioContext:
        """``mel [1, n_mels, frames]`` → cross keys/values (frames ≤ 3000, even);
        ``run_options`` lets another thread abandon the run."""
        return self.context(self.encoder.run(mel, run_options), mel.shape[-1])

    def context(self, cross: dict[str, np.ndarray], n_frames: int) -> AudioContext:
        """The window of an encoder's fp32 ``cross`` keys/values, in the form this model's
        decoders read."""
        return AudioContext(self._quantiser(cross, self.cross_form), n_frames)

    def check_form(self, session, what: str) -> None:
        """``session`` (a beam or alignment graph of this bundle) reads the window as the
        decoder does (ValueError otherwise: a graph left from another converter)."""
        form = CrossForm.of(session)
        if form is not self.cross_form:
            raise ValueError(f"{self.name}: {what} reads the audio as {form.value} but the "
                             f"decoder as {self.cross_form.value}; reinstall the model")

    def decoder_state(self, ctx: AudioContext) -> DecoderState:
        """A decoder of one sequence bound to ``ctx``; caches are recycled between windows."""
        state = self._states.take(DecoderState.slots, lambda: DecoderState(self))
        state.bind(ctx)
        return state

    def beam_state(self, ctx: AudioContext, slots: int) -> BeamDecoderState:
        """A decoder of up to ``slots`` hypotheses bound to ``ctx`` (one empty hypothesis), on
        the batched graph (:meth:`beam_session`)."""
        self.beam_session()
        state = self._states.take(slots, lambda: BeamDecoderState(self, slots))
        state.bind(ctx)
        return state

    def release(self, state: DecoderState | BeamDecoderState) -> None:
        """``state`` (either kind) is done with its window: kept for the next."""
        state.feed = {}
        self._states.give(state.slots, state)

    beam_check: dict | None = None  # as2d.runtime.rows.probe_beams' verdict, once checked

    def beam_session(self):
        """The batched (beam-search) decoder session, made once, on first use (ValueError if
        this model has no beam graph)."""
        if self._beam_session is not None:
            return self._beam_session
        if self.beam_graph is None:
            raise ValueError(f"{self.name}: this bundle has no batched decoder for beam search "
                             "(reinstall it with `as2d models install NAME --force`)")
        sess = make_session(self.beam_graph, self.threads, self.spin, self.tables)
        self.check_form(sess, "the beam-search decoder")
        with self._lock:
            if self._beam_session is None:
                self._beam_outputs = [o.name for o in sess.get_outputs()]
                self.beam_logit_rows = takes_optional(sess, "logit_rows")
                self._beam_session = sess
            return self._beam_session

    def alignment_session(self):
        """The word-alignment graph's session, made once, on first use (the graph too where
        the bundle lacks it); check :attr:`alignment_graph` is not None first."""
        if self._alignment_session is None:
            graph = self.alignment_graph
            sess = make_session(graph() if callable(graph) else graph, self.threads,
                                tables=self.tables)
            self.check_form(sess, "the word-alignment graph")
            with self._lock:
                if self._alignment_session is None:
                    self._alignment_session = sess
        return self._alignment_session

    def beam_probe(self):
        """The batched side of the beam row check (:func:`as2d.runtime.rows.probe_beams`):
        states over the row probe's audio context (released like the row probe's)."""
        ctx = self._probe_context()
        return lambda slots: self.beam_state(ctx, slots)

    @property
    def beam_memo(self):
        """Remembered in the models folder under the beam graph's sha256."""
        return self._memo(self.manifest["files"].get("decoder_beam"))


def row_probe(model, ctx: AudioContext):
    """The passes of the row check (:mod:`as2d.runtime.rows`) of any Whisper decoder: over the
    audio ``ctx``, the start of a transcript and a sentence, in one pass wider than any the
    budget verifies; ``(new state, tokens, release)``."""
    tokens = list(model.tokenizer.sot_sequence("en" if model.multilingual else None))
    tokens += model.tokenizer.encode(ROW_PROBE_WORDS)
    return (lambda: model.decoder_state(ctx)), tokens, model.release


WHISPER_TEXT_CTX = 448  # the decoder's positional table in every Whisper model
WHISPER_AUDIO_CTX = 1500  # the encoder's, for a 30-second window
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>, the last ids of every Whisper vocabulary


def detect_language(model, ctx: AudioContext) -> tuple[str, float]:
    """The most probable language of the audio ``ctx`` encodes, and its probability: one
    decoder step after start-of-transcript, over the language tokens (whisper's way)."""
    tk = model.tokenizer
    state = model.decoder_state(ctx)
    try:
        logits = state.forward([tk.sot])[0]
    finally:
        model.release(state)
    codes = list(tk.languages)
    sub = logits[np.array([tk.languages[c] for c in codes])]
    p = np.exp(sub - sub.max())
    p /= p.sum()
    best = int(np.argmax(p))
    return codes[best], float(p[best])


def check_against_graphs(path: Path, dims: WhisperDims, generation: dict, decoder,
                         decoder_file: str, tokenizer: WhisperTokenizer) -> None:
    """The manifest's numbers and the tokenizer against what the decoder graph takes and gives
    (ValueError naming the file and the field): metadata that disagrees would size caches
    wrongly, fail deep in onnxruntime, or decode another model's tokens into garbage, exit 0."""
    mf = path / "manifest.json"

    def bad(field: str, said, real, where: str = decoder_file) -> ValueError:
        return ValueError(f"{mf}: {field} is {said} but {where} has {real}; "
                          "reinstall the model")

    ins = {i.name: i.shape for i in decoder.get_inputs()}
    outs = {o.name: o.shape for o in decoder.get_outputs()}
    layers = sum(1 for n in ins if n.startswith("past_k_"))
    if layers and layers != dims.n_text_layer:
        raise bad("dims.n_text_layer", dims.n_text_layer, f"{layers} decoder layers")
    state = (ins.get("past_k_0") or [None, None])[-1]
    if isinstance(state, int) and state != dims.n_text_state:
        raise bad("dims.n_text_state", dims.n_text_state, f"width {state}")
    heads = (ins.get("cross_k_0") or [None])[0]
    if isinstance(heads, int) and heads != dims.n_text_head:
        raise bad("dims.n_text_head", dims.n_text_head, f"{heads} heads")
    vocab = (outs.get("logits") or [None])[-1]
    if isinstance(vocab, int) and vocab != dims.n_vocab:
        raise bad("dims.n_vocab", dims.n_vocab, f"{vocab} logits")
    # Every Whisper has these contexts; the graphs do not show them.
    if dims.n_text_ctx != WHISPER_TEXT_CTX:
        raise bad("dims.n_text_ctx", dims.n_text_ctx, f"{WHISPER_TEXT_CTX} positions",
                  "a Whisper decoder")
    if dims.n_audio_ctx != WHISPER_AUDIO_CTX:
        raise bad("dims.n_audio_ctx", dims.n_audio_ctx, f"{WHISPER_AUDIO_CTX} positions",
                  "a Whisper encoder")
    heads_list = generation.get("alignment_heads", [])
    if not isinstance(heads_list, list) or not all(
            isinstance(h, list) and len(h) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in h)
            and 0 <= h[0] < dims.n_text_layer and 0 <= h[1] < dims.n_text_head
            for h in heads_list):
        raise ValueError(f"{mf}: generation.alignment_heads names a head outside the decoder's "
                         f"{dims.n_text_layer} layers × {dims.n_text_head} heads; "
                         "reinstall the model")
    check_tokenizer(mf, dims, generation, tokenizer)


def check_tokenizer(mf: Path, dims: WhisperDims, generation: dict,
                    tokenizer: WhisperTokenizer) -> None:
    """``tokenizer.json`` belongs to this model: its special tokens sit where Whisper puts them
    in ``n_vocab`` rows (the timestamps its last 1501 ids), or ValueError."""
    tok = tokenizer.path
    text = tokenizer.tok.get_vocab_size(with_added_tokens=True)
    if tokenizer.timestamp_begin + N_TIMESTAMPS != dims.n_vocab or text > dims.n_vocab:
        raise ValueError(f"{tok} does not belong to this model: its <|notimestamps|> is id "
                         f"{tokenizer.no_timestamps} and it has {text} tokens, but "
                         f"{mf.name}'s dims.n_vocab is {dims.n_vocab}; reinstall the model")
    specials = {"<|endoftext|>": tokenizer.eot, "<|startoftranscript|>": tokenizer.sot,
                "<|translate|>": tokenizer.translate, "<|transcribe|>": tokenizer.transcribe}
    for token, tid in specials.items():
        if not 0 <= tid < tokenizer.timestamp_begin:
            raise ValueError(f"{tok}: special token {token} has id {tid}, outside this "
                             f"model's vocabulary; reinstall the model")
    if tokenizer.sot != tokenizer.eot + 1:
        raise ValueError(f"{tok}: <|startoftranscript|> is not next to <|endoftext|> "
                         "(not a Whisper tokenizer); reinstall the model")


def _ask_rows(feed: dict, takes: bool, t: int, logit_rows: int | None) -> int:
    """How many of a pass's last ``t`` rows of logits come back (all when ``logit_rows`` is
    None); a graph that ``takes`` the input is asked for only those, and the default (every
    row: a verification pass) is not fed."""
    rows = t if logit_rows is None else min(t, logit_rows)
    if takes and rows < t:
        feed["logit_rows"] = np.array([rows], dtype=np.int64)
    else:
        feed.pop("logit_rows", None)
    return rows


class _Bound:
    """What both kinds of window state add to their cache: the model, and the window's cross
    keys/values as the standing part of every pass's feed."""

    model: WhisperModel
    feed: dict[str, np.ndarray]

    def bind(self, ctx: AudioContext) -> None:
        self.feed = dict(ctx.cross)
        self.reset()


class DecoderState(_Bound, KVCache):
    """The decoder of one window: self-attention cache plus the window's cross keys/values."""

    def __init__(self, model: WhisperModel) -> None:
        d = model.dims
        super().__init__(d.n_text_layer, d.n_text_ctx, d.n_text_state)
        self.model, self.feed = model, {}

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray:
        """Run ``tokens`` after the cached ones; returns the logits ``[R, n_vocab]`` of the last
        ``R = logit_rows`` of them (all by default, as verification needs)."""
        t = len(tokens)
        if not t:
            return np.zeros((0, self.model.dims.n_vocab), np.float32)
        rows = _ask_rows(self.feed, self.model.logit_rows, t, logit_rows)
        self.feed["tokens"] = np.asarray(tokens, dtype=np.int64)
        out = self._run(self.model.decoder, self.model._outputs, self.feed, t, "decoder")
        return out["logits"][-rows:]


class BeamDecoderState(_Bound, PooledCache):
    """The hypotheses of one window's beam search: a pooled cache (see
    :class:`~as2d.runtime.kvcache.PooledCache`) plus the window's cross keys/values."""

    def __init__(self, model: WhisperModel, slots: int) -> None:
        d = model.dims
        super().__init__(d.n_text_layer, d.n_text_ctx, d.n_text_state, slots)
        self.model, self.feed = model, {}

    def forward(self, tokens: Sequence[Sequence[int]],
                logit_rows: int | None = None) -> np.ndarray:
        """Run ``tokens[h]`` after hypothesis ``h``'s past, for every hypothesis (rows of equal
        length); the logits of each one's last ``R = logit_rows`` tokens (all by default)
        ``[hypotheses, R, n_vocab]``."""
        arr = np.asarray(tokens, dtype=np.int64).reshape(self.hypotheses, -1)
        t = arr.shape[1]
        if not t:
            return np.zeros((self.hypotheses, 0, self.model.dims.n_vocab), np.float32)
        session = self.model.beam_session()
        rows = _ask_rows(self.feed, self.model.beam_logit_rows, t, logit_rows)
        out = self._run(session, self.model._beam_outputs, self.feed, arr)
        return out["logits"][:, -rows:]
