"""Whisper in the common Hugging Face ONNX layout (an optimum export), from a local folder.

``encoder_model.onnx``, and either ``decoder_model_merged.onnx`` (a ``use_cache_branch``
switch) or ``decoder_model.onnx`` + ``decoder_with_past_model.onnx``; past keys/values named
``past_key_values.N.{decoder,encoder}.{key,value}``; ``tokenizer.json`` and ``config.json``. The
adapter offers :class:`~as2d.runtime.whisper.model.WhisperModel`'s interface. Such graphs were
not written for verification, so :func:`as2d.runtime.rows.rows_exact` decides whether one may
serve as a speculative target.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d.runtime.json_files import MAX_JSON, read_json_capped
from as2d.runtime.sessions import make_session
from as2d.runtime.whisper.model import (
    WHISPER_TEXT_CTX,
    AudioContext,
    WhisperDims,
    check_tokenizer,
    row_probe,
)
from as2d.runtime.whisper.tokenizer import WhisperTokenizer


class HFLayoutError(ValueError):
    """The folder is not a usable Hugging Face ONNX Whisper export."""


def graph_folder(folder: str | Path) -> Path | None:
    """Where a Hugging Face Whisper folder keeps its ONNX graphs: the folder itself (an optimum
    export) or its ``onnx/`` subfolder (the layout of the hub's ONNX repositories, which keep
    ``config.json`` and ``tokenizer.json`` at the top and the graphs, with their quantized
    variants, below). None when neither holds an encoder graph. The plain graphs are taken,
    never a ``_quantized``/``_fp16`` variant: a variant's rows are its own question for the
    row check, and the user who wants one can point at a folder that holds it alone."""
    root = Path(folder)
    for place in (root, root / "onnx"):
        if (place / "encoder_model.onnx").is_file():
            return place
    return None


def _dims(cfg: dict) -> WhisperDims:
    try:
        return WhisperDims(
            n_mels=int(cfg.get("num_mel_bins", 80)),
            n_audio_ctx=int(cfg.get("max_source_positions", 1500)),
            n_audio_state=int(cfg["d_model"]),
            n_audio_head=int(cfg["encoder_attention_heads"]),
            n_audio_layer=int(cfg["encoder_layers"]),
            n_vocab=int(cfg["vocab_size"]),
            n_text_ctx=int(cfg.get("max_target_positions", 448)),
            n_text_state=int(cfg["d_model"]),
            n_text_head=int(cfg["decoder_attention_heads"]),
            n_text_layer=int(cfg["decoder_layers"]),
        )
    except KeyError as exc:
        raise HFLayoutError(f"config.json lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise HFLayoutError(f"config.json has a field that is not a number ({exc})") from None


_LAYER = re.compile(r"^(?:past_key_values|present)\.(\d+)\.decoder\.key$")


def _check_graphs(path: Path, dims: WhisperDims, encoder, graphs: list) -> None:
    """``config.json``'s numbers against what the graphs really take and give (HFLayoutError
    naming the file and the field): a config that disagrees would otherwise fail deep in
    onnxruntime (``INVALID_ARGUMENT``) or in a lookup (``KeyError: '4.decoder.key'``)."""
    cfg = path / "config.json"

    def bad(field: str, said, graph: str, real) -> HFLayoutError:
        return HFLayoutError(f"{cfg}: {field} is {said} but {graph} has {real}")

    for field, v in (("d_model", dims.n_text_state), ("decoder_layers", dims.n_text_layer),
                     ("decoder_attention_heads", dims.n_text_head),
                     ("vocab_size", dims.n_vocab), ("num_mel_bins", dims.n_mels)):
        if v <= 0 or v >= 1 << 20:
            raise HFLayoutError(f"{cfg}: {field} {v} is not a size")
    if dims.n_text_state % dims.n_text_head:
        raise HFLayoutError(f"{cfg}: d_model {dims.n_text_state} is not a multiple of "
                            f"decoder_attention_heads {dims.n_text_head}")
    if dims.n_text_ctx != WHISPER_TEXT_CTX:  # every Whisper's; the graphs do not show it
        raise HFLayoutError(f"{cfg}: max_target_positions {dims.n_text_ctx} is not a Whisper "
                            f"decoder's ({WHISPER_TEXT_CTX})")
    ins = {i.name: i.shape for i in encoder.get_inputs()}
    outs = {o.name: o.shape for o in encoder.get_outputs()}
    mel = (ins.get("input_features") or [None, None])[1]
    if "input_features" not in ins or "last_hidden_state" not in outs:
        raise HFLayoutError(f"{path / 'encoder_model.onnx'}: not a Whisper encoder (no "
                            "input_features → last_hidden_state)")
    if isinstance(mel, int) and mel != dims.n_mels:
        raise bad("num_mel_bins", dims.n_mels, "encoder_model.onnx", f"{mel} mel bands")
    frames = (outs["last_hidden_state"] + [None, None])[1]
    if isinstance(frames, int) and frames != dims.n_audio_ctx:
        raise bad("max_source_positions", dims.n_audio_ctx, "encoder_model.onnx",
                  f"{frames} positions")
    width = outs["last_hidden_state"][-1]
    if isinstance(width, int) and width != dims.n_audio_state:
        raise bad("d_model", dims.n_audio_state, "encoder_model.onnx", f"width {width}")
    for graph, session in graphs:
        shapes = {i.name: i.shape for i in session.get_inputs()}
        shapes.update({o.name: o.shape for o in session.get_outputs()})
        layers = {int(m.group(1)) for n in shapes for m in [_LAYER.match(n)] if m}
        if layers != set(range(dims.n_text_layer)):
            raise bad("decoder_layers", dims.n_text_layer, graph, f"{len(layers)} layers")
        vocab = (shapes.get("logits") or [None])[-1]
        if isinstance(vocab, int) and vocab != dims.n_vocab:
            raise bad("vocab_size", dims.n_vocab, graph, f"{vocab} logits")
        heads = (shapes.get("present.0.decoder.key") or [None, None])[1]
        if isinstance(heads, int) and heads != dims.n_text_head:
            raise bad("decoder_attention_heads", dims.n_text_head, graph, f"{heads} heads")
        hidden = (shapes.get("encoder_hidden_states") or [None])[-1]
        if isinstance(hidden, int) and hidden != dims.n_text_state:
            raise bad("d_model", dims.n_text_state, graph, f"width {hidden}")


class _Graph:
    """A decoder session with its input and output names, read once."""

    __slots__ = ("session", "inputs", "outputs", "present")

    def __init__(self, session) -> None:
        self.session = session
        self.inputs = frozenset(i.name for i in session.get_inputs())
        self.outputs = [o.name for o in session.get_outputs()]
        # (output name, past key) of every ``present.*`` output, in output order
        self.present = [(n, n[len("present."):]) for n in self.outputs
                        if n.startswith("present.")]


class HFWhisperModel:
    """Encoder and decoder sessions of a Hugging Face ONNX Whisper export."""

    encoder_name = "onnxruntime"  # its encoder graph runs nowhere else
    # What it can do besides greedy decoding (as WhisperModel declares it): nothing.
    beam_graph = None
    alignment_graph = None

    def __init__(self, folder: str | Path, threads: int = 1,
                 encoder_threads: int | None = None, name: str | None = None,
                 role: str = "target") -> None:
        self.path = Path(folder)
        graphs = graph_folder(self.path) or self.path
        need = ["tokenizer.json", "config.json"]
        missing = [f for f in need if not (self.path / f).is_file()]
        if not (graphs / "encoder_model.onnx").is_file():
            missing.insert(0, "encoder_model.onnx")
        merged = graphs / "decoder_model_merged.onnx"
        split = (graphs / "decoder_model.onnx", graphs / "decoder_with_past_model.onnx")
        if not merged.is_file() and not all(p.is_file() for p in split):
            missing.append("decoder_model_merged.onnx (or decoder_model.onnx + "
                           "decoder_with_past_model.onnx)")
        if missing:
            raise HFLayoutError(f"{self.path}: not a Hugging Face ONNX Whisper folder "
                                f"(missing {', '.join(missing)})")
        try:
            cfg = read_json_capped(self.path / "config.json")
        except ValueError as exc:
            raise HFLayoutError(str(exc)) from None
        if not isinstance(cfg, dict):
            raise HFLayoutError(f"{self.path / 'config.json'}: not a model configuration")
        self.config = cfg
        try:
            self.dims = _dims(cfg)
        except HFLayoutError as exc:
            raise HFLayoutError(f"{self.path}/{exc}") from None
        self.name = name or self.path.name
        self.threads = threads
        size = (self.path / "tokenizer.json").stat().st_size
        if size > MAX_JSON:  # read whole: refused before, not after
            raise HFLayoutError(f"{self.path / 'tokenizer.json'}: {size} bytes is too large "
                                "for a Whisper tokenizer")
        self.tokenizer = WhisperTokenizer(self.path / "tokenizer.json", self.dims.n_vocab)
        self.encoder = make_session(graphs / "encoder_model.onnx", encoder_threads or threads)
        self.merged = merged.is_file()
        self._files = [merged] if self.merged else list(split)
        self.graphs = [_Graph(make_session(f, threads)) for f in self._files]
        _check_graphs(self.path, self.dims, self.encoder,
                      [(f.name, g.session) for f, g in zip(self._files, self.graphs)])
        try:
            check_tokenizer(self.path / "config.json", self.dims, {}, self.tokenizer)
        except ValueError as exc:
            raise HFLayoutError(str(exc).replace("; reinstall the model", "")) from None
        # Per decoder layer, in feed order: (input name, key in a state's past, is self-attention)
        d = self.dims
        self._past_names = [(f"past_key_values.{i}.{kind}.{kv}", f"{i}.{kind}.{kv}",
                             kind == "decoder")
                            for i in range(d.n_text_layer)
                            for kind in ("decoder", "encoder") for kv in ("key", "value")]
        # The merged graph's past inputs on a first pass (zero cached positions); never written.
        self._empty_past = np.zeros((1, d.n_text_head, 0, d.n_text_state // d.n_text_head),
                                    np.float32)
        self.row_check: dict | None = None  # as2d.runtime.rows' verdict, once checked

    @property
    def multilingual(self) -> bool:
        return self.tokenizer.multilingual

    def encode(self, mel: np.ndarray, run_options=None) -> AudioContext:
        mel = np.ascontiguousarray(mel, dtype=np.float32)
        (hidden,) = self.encoder.run(["last_hidden_state"], {"input_features": mel}, run_options)
        return AudioContext({"encoder_hidden_states": hidden}, mel.shape[-1])

    def decoder_state(self, ctx: AudioContext) -> HFDecoderState:
        return HFDecoderState(self, ctx)

    def release(self, state: HFDecoderState) -> None:
        state.past = None

    def row_probe(self):
        """The passes of the row check (:mod:`as2d.runtime.rows`): a plain export is not built
        for row-exactness, so it is checked on every load (``row_memo`` is None)."""
        return row_probe(self, self.encode(np.zeros((1, self.dims.n_mels, 3000), np.float32)))

    row_memo = None  # a folder as2d did not make: checked on every load


class HFDecoderState:
    """One window's decoder over a Hugging Face export; the KV cache is the last `present`."""

    def __init__(self, model: HFWhisperModel, ctx: AudioContext) -> None:
        self.model = model
        self.hidden = ctx.cross["encoder_hidden_states"]
        self.capacity = model.dims.n_text_ctx
        self.length = 0
        self.past: dict[str, np.ndarray] | None = None

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray:
        """The logits of the last ``logit_rows`` of ``tokens`` (all by default); an export's
        graph computes every row's, so the others are dropped here."""
        t = len(tokens)
        if t == 0:
            return np.zeros((0, self.model.dims.n_vocab), np.float32)
        if self.length + t > self.capacity:
            raise ValueError(f"decoder context is full ({self.length} + {t} > {self.capacity})")
        m = self.model
        graphs = m.graphs
        ids = np.asarray([tokens], dtype=np.int64)
        with_past = self.length > 0 and self.past is not None
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if m.merged:
            graph = graphs[0]
            feed["encoder_hidden_states"] = self.hidden
            feed["use_cache_branch"] = np.array([with_past])
            if with_past:
                for name, key, own in m._past_names:
                    feed[name] = self._past(key, own)
            else:
                empty = m._empty_past
                for name, _, _ in m._past_names:
                    feed[name] = empty
        elif with_past:
            graph = graphs[1]
            for name, key, own in m._past_names:
                feed[name] = self._past(key, own)
        else:
            graph = graphs[0]
            feed["encoder_hidden_states"] = self.hidden
        names, inputs = graph.outputs, graph.inputs
        feed = {k: v for k, v in feed.items() if k in inputs}
        out = dict(zip(names, graph.session.run(names, feed)))
        present = {key: out[name] for name, key in graph.present}
        if with_past:
            # Encoder keys/values do not change within a window (a with-past graph may not
            # even return them): keep the first ones.
            present.update({k: v for k, v in self.past.items() if ".encoder." in k})
        self.past = present
        self.length += t
        return out["logits"][0][-(t if logit_rows is None else min(t, logit_rows)):]

    def _past(self, key: str, own: bool) -> np.ndarray:
        """The cached keys/values ``key``; self-attention ones cut to the valid length."""
        arr = self.past[key]
        if own and arr.shape[2] != self.length:
            arr = np.ascontiguousarray(arr[:, :, : self.length])
        return arr

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.length = length
        if length == 0:
            self.past = None
