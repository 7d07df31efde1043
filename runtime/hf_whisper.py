"""Whisper in the common Hugging Face ONNX layout (an optimum export), from a local folder.

Users with internet access often have this layout: ``encoder_model.onnx``, and either
``decoder_model_merged.onnx`` (one graph with a ``use_cache_branch`` switch) or the pair
``decoder_model.onnx`` + ``decoder_with_past_model.onnx``; past keys/values named
``past_key_values.N.{decoder,encoder}.{key,value}``; ``tokenizer.json`` and ``config.json``.

The adapter offers the same interface as :class:`runtime.whisper.WhisperModel`. Such graphs were
not written for verification, so a multi-token pass may round differently from single-token
passes: :meth:`HFWhisperModel.check_exact_rows` measures it, and the CLI only lets a model that
passes serve as a speculative target.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from .sessions import make_session
from .tokenizer import WhisperTokenizer
from .whisper import AudioContext, WhisperDims


class HFLayoutError(ValueError):
    """The folder is not a usable Hugging Face ONNX Whisper export."""


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


class HFWhisperModel:
    """Encoder and decoder sessions of a Hugging Face ONNX Whisper export."""

    def __init__(self, folder: str | Path, threads: int = 1,
                 encoder_threads: int | None = None, name: str | None = None,
                 role: str = "target") -> None:
        self.path = Path(folder)
        need = ["encoder_model.onnx", "tokenizer.json", "config.json"]
        missing = [f for f in need if not (self.path / f).is_file()]
        merged = self.path / "decoder_model_merged.onnx"
        split = (self.path / "decoder_model.onnx", self.path / "decoder_with_past_model.onnx")
        if not merged.is_file() and not all(p.is_file() for p in split):
            missing.append("decoder_model_merged.onnx (or decoder_model.onnx + "
                           "decoder_with_past_model.onnx)")
        if missing:
            raise HFLayoutError(f"{self.path}: not a Hugging Face ONNX Whisper folder "
                                f"(missing {', '.join(missing)})")
        cfg = json.loads((self.path / "config.json").read_text())
        self.config = cfg
        self.dims = _dims(cfg)
        self.name = name or self.path.name
        self.role = role
        self.threads = threads
        self.tokenizer = WhisperTokenizer(self.path / "tokenizer.json", self.dims.n_vocab)
        self.encoder = make_session(self.path / "encoder_model.onnx", encoder_threads or threads)
        self.merged = merged.is_file()
        self._files = [merged] if self.merged else list(split)
        self._sessions: dict[int, list] = {threads: [make_session(f, threads)
                                                     for f in self._files]}
        self._lock = threading.Lock()
        self.exact_rows: bool | None = None  # unknown until checked

    @property
    def multilingual(self) -> bool:
        return self.tokenizer.multilingual

    def sessions(self, threads: int | None = None) -> list:
        threads = threads or self.threads
        with self._lock:
            if threads not in self._sessions:
                self._sessions[threads] = [make_session(f, threads) for f in self._files]
            return self._sessions[threads]

    def encode(self, mel: np.ndarray, run_options=None) -> AudioContext:
        mel = np.ascontiguousarray(mel, dtype=np.float32)
        (hidden,) = self.encoder.run(["last_hidden_state"], {"input_features": mel}, run_options)
        return AudioContext({"encoder_hidden_states": hidden}, mel.shape[-1])

    def decoder_state(self, ctx: AudioContext) -> "HFDecoderState":
        return HFDecoderState(self, ctx)

    def release(self, state: "HFDecoderState") -> None:
        state.past = None

    def check_exact_rows(self) -> bool:
        """Is a multi-token pass bit-identical, row by row, to single-token passes?"""
        if self.exact_rows is None:
            mel = np.zeros((1, self.dims.n_mels, 3000), np.float32)
            ctx = self.encode(mel)
            tokens = self.tokenizer.sot_sequence("en" if self.multilingual else None)
            tokens = tokens + self.tokenizer.encode(" a test of rows")
            a = self.decoder_state(ctx)
            together = a.forward(tokens)
            b = self.decoder_state(ctx)
            alone = np.concatenate([b.forward([t]) for t in tokens])
            self.exact_rows = bool(np.array_equal(together, alone))
        return self.exact_rows


class HFDecoderState:
    """One window's decoder over a Hugging Face export; the KV cache is the last `present`."""

    def __init__(self, model: HFWhisperModel, ctx: AudioContext) -> None:
        self.model = model
        self.hidden = ctx.cross["encoder_hidden_states"]
        self.capacity = model.dims.n_text_ctx
        self.length = 0
        self.past: dict[str, np.ndarray] | None = None
        self.passes = 0
        d = model.dims
        self._layers = d.n_text_layer
        self._heads, self._hd = d.n_text_head, d.n_text_state // d.n_text_head

    def forward(self, tokens: Sequence[int], threads: int | None = None) -> np.ndarray:
        t = len(tokens)
        if t == 0:
            return np.zeros((0, self.model.dims.n_vocab), np.float32)
        if self.length + t > self.capacity:
            raise ValueError(f"decoder context is full ({self.length} + {t} > {self.capacity})")
        sessions = self.model.sessions(threads)
        ids = np.asarray([tokens], dtype=np.int64)
        with_past = self.length > 0 and self.past is not None
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if self.model.merged:
            sess = sessions[0]
            feed["encoder_hidden_states"] = self.hidden
            feed["use_cache_branch"] = np.array([with_past])
            empty = np.zeros((1, self._heads, 0, self._hd), np.float32)
            for i in range(self._layers):
                for kind in ("decoder", "encoder"):
                    for kv in ("key", "value"):
                        name = f"past_key_values.{i}.{kind}.{kv}"
                        feed[name] = self._past(i, kind, kv) if with_past else empty
        elif with_past:
            sess = sessions[1]
            for i in range(self._layers):
                for kind in ("decoder", "encoder"):
                    for kv in ("key", "value"):
                        feed[f"past_key_values.{i}.{kind}.{kv}"] = self._past(i, kind, kv)
        else:
            sess = sessions[0]
            feed["encoder_hidden_states"] = self.hidden
        names = [o.name for o in sess.get_outputs()]
        feed = {k: v for k, v in feed.items() if k in {i.name for i in sess.get_inputs()}}
        out = dict(zip(names, sess.run(names, feed)))
        present = {k[len("present."):]: v for k, v in out.items() if k.startswith("present.")}
        if with_past:
            # Encoder keys/values do not change within a window (a with-past graph may not
            # even return them): keep the first ones.
            present.update({k: v for k, v in self.past.items() if ".encoder." in k})
        self.past = present
        self.length += t
        self.passes += 1
        return out["logits"][0]

    def _past(self, layer: int, kind: str, kv: str) -> np.ndarray:
        arr = self.past[f"{layer}.{kind}.{kv}"]
        if kind == "decoder" and arr.shape[2] != self.length:
            arr = np.ascontiguousarray(arr[:, :, : self.length])
        return arr

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.length = length
        if length == 0:
            self.past = None
