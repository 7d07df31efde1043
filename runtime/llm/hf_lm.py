"""A decoder-only LLM in the common Hugging Face ONNX layout (an optimum export), from a folder.

``as2d ask --llm PATH`` lets users bring a stronger (instruction-tuned) answering model than the
built-in Gemma 3 270M. The folder holds ``model.onnx`` (or ``decoder_model_merged.onnx`` with a
``use_cache_branch`` switch; also looked for under ``onnx/``), ``tokenizer.json``,
``config.json`` and perhaps ``generation_config.json`` / ``tokenizer_config.json`` (special
tokens, chat template). The graph takes ``input_ids``, ``attention_mask``, optionally
``position_ids``, and ``past_key_values.N.key/value [1, kv_heads, past, head_dim]``, and returns
``logits`` and ``present.N.key/value``.

:class:`HFCausalLM` offers the interface of :class:`as2d.runtime.llm.lm.CausalLM` (``state()``,
``release``, ``prefill``; states with ``forward(tokens, logit_rows)``,
``truncate``, ``length``, ``capacity``), so the answer generator serves both.

Such graphs were not written for verification: a pass over several tokens may round
differently from single-token passes (a different matrix kernel, a quantisation scale shared
by the whole pass). Speculative verification is only lossless when it does not, so
:func:`as2d.runtime.rows.rows_exact` runs a short sequence both ways at load and compares the
logits bit for bit; ``lossless`` says whether candidates may be used.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from as2d.runtime.llm.lm import LMBackend, TokenizerBase
from as2d.runtime.sessions import make_session

GRAPHS = ("model.onnx", "decoder_model_merged.onnx")
DEFAULT_CAPACITY = 4096  # cap on the context we use, whatever the model's own limit


class HFModelError(ValueError):
    """The folder is not a usable Hugging Face ONNX decoder-only export (one-line message)."""


MAX_JSON = 16 << 20  # bytes: config files are a few kB (tokenizer.json is read by tokenizers)
MAX_TOKENIZER = 256 << 20  # bytes of tokenizer.json (the largest real ones are ~35 MB)
MAX_TEMPLATE = 1 << 20  # bytes of chat_template.jinja (real ones are a few kB)


def _read_json(path: Path) -> dict:
    """A config file of the (untrusted) folder: size-capped, never read whole into memory
    past the cap, and too deep a nesting is one line, not a RecursionError."""
    if not path.is_file():
        return {}
    try:
        size = path.stat().st_size
        if size > MAX_JSON:
            raise HFModelError(f"{path.name}: {size} bytes is too large for a config file")
        with open(path, "rb") as fh:
            data = json.loads(fh.read(MAX_JSON + 1).decode("utf-8"))
    except RecursionError:
        raise HFModelError(f"{path.name} is nested too deeply to be a config file") from None
    except (OSError, ValueError) as exc:  # also bad UTF-8 and numbers too long to parse
        raise HFModelError(f"{path.name} cannot be read ({str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise HFModelError(f"{path.name} is not a JSON object")
    return data


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list[int]:
    if value is None:
        return []
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31
               for v in values):
        raise HFModelError(f"token ids must be non-negative integers, not {str(value)[:60]}")
    return list(values)


class HFTokenizer(TokenizerBase):
    """``tokenizer.json`` with the special ids from the config files (the interface of
    :class:`as2d.runtime.llm.lm.LLMTokenizer`)."""

    def __init__(self, path: Path, config: dict, generation: dict, tok_config: dict) -> None:
        self.path = path
        size = path.stat().st_size
        if size > MAX_TOKENIZER:  # read whole by tokenizers: refused before, not after
            raise HFModelError(f"tokenizer.json: {size} bytes is too large for a tokenizer")
        try:
            self.tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises its own Exception types
            raise HFModelError(f"tokenizer.json cannot be read "
                               f"({str(exc).splitlines()[0][:200] if str(exc) else exc!r})") \
                from None
        tok = self.tok

        def lookup(name: str) -> int | None:
            text = _token_text(tok_config.get(name))
            return tok.token_to_id(text) if text else None

        bos = _ids(generation.get("bos_token_id", config.get("bos_token_id")))
        self.bos: int | None = bos[0] if bos else lookup("bos_token")
        eos = _ids(generation.get("eos_token_id", config.get("eos_token_id")))
        if not eos and lookup("eos_token") is not None:
            eos = [lookup("eos_token")]
        if not eos:
            raise HFModelError("no end-of-sequence token (eos_token_id) in config.json, "
                               "generation_config.json or tokenizer_config.json")
        self.eos: int = eos[0]
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(eos))
        # Llama-style tokenizers want <bos> in front; GPT-2 style ones do not.
        self.add_bos: bool = bool(tok_config.get("add_bos_token", self.bos is not None
                                                 and self._post_processor_adds_bos()))
        self.end_of_turn: int | None = None
        for name in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>"):
            if tok.token_to_id(name) is not None:
                self.end_of_turn = tok.token_to_id(name)
                break

    def _post_processor_adds_bos(self) -> bool:
        ids = self.tok.encode("a", add_special_tokens=True).ids
        return bool(ids) and ids[0] == self.bos


class HFCausalLM(LMBackend):
    """One onnxruntime session over a Hugging Face ONNX decoder, with recyclable states."""

    def __init__(self, folder: str | Path, threads: int = 1, name: str | None = None,
                 capacity: int | None = None, check_rows: bool = True,
                 progress: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.path = Path(folder)
        graph = next((d / g for g in GRAPHS for d in (self.path, self.path / "onnx")
                      if (d / g).is_file()), None)
        if graph is None:
            raise HFModelError("no model.onnx or decoder_model_merged.onnx in the folder")
        if not (self.path / "tokenizer.json").is_file():
            raise HFModelError("no tokenizer.json in the folder")
        config = _read_json(self.path / "config.json")
        generation = _read_json(self.path / "generation_config.json")
        tok_config = _read_json(self.path / "tokenizer_config.json")
        self.config = config
        self.name = name or self.path.name
        self.threads = threads
        self.tokenizer = HFTokenizer(self.path / "tokenizer.json", config, generation,
                                     tok_config)
        self.bos = self.tokenizer.bos
        self.eos = self.tokenizer.eos
        self.end_of_turn = self.tokenizer.end_of_turn
        stops = list(self.tokenizer.eos_ids)
        if self.end_of_turn is not None:
            stops.append(self.end_of_turn)
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))
        template = tok_config.get("chat_template")
        if isinstance(template, list):  # several named templates: take the default one
            template = next((t.get("template") for t in template
                             if isinstance(t, dict) and t.get("name") == "default"), None)
        self._template_file = "tokenizer_config.json"
        jinja = self.path / "chat_template.jinja"
        if jinja.is_file():  # newer transformers save it beside tokenizer_config.json
            template, self._template_file = self._read_template(jinja), jinja.name
        self.chat_template: str | None = template if isinstance(template, str) else None
        if self.chat_template is not None:
            self._check_template()
        try:
            # Not spinning: its row check runs at load, beside the transcription.
            self.session = make_session(graph, threads)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise HFModelError(f"{graph.name} cannot be loaded "
                               f"({str(exc).splitlines()[0][:200]})") from None
        self._inputs = {i.name: i for i in self.session.get_inputs()}
        self._outputs = [o.name for o in self.session.get_outputs()]
        if "input_ids" not in self._inputs or "logits" not in self._outputs:
            raise HFModelError(f"{graph.name} does not look like a causal LM export (needs "
                               "input_ids → logits)")
        self._layers = self._cache_layout()
        self._check_config()
        limit = (config.get("max_position_embeddings") or config.get("n_positions")
                 or config.get("max_sequence_length") or DEFAULT_CAPACITY)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 64:
            raise HFModelError(f"config.json: the context length must be an integer of at "
                               f"least 64, not {str(limit)[:40]}")
        self.capacity = min(limit, int(capacity or DEFAULT_CAPACITY))
        if check_rows:
            t0 = time.perf_counter()
            if progress:
                verdict = ("exact: speculative answers are lossless" if self.lossless else
                           "NOT exact: answers are generated without candidates")
                progress(f"{self.name}: multi-token passes vs single-token passes "
                         f"{verdict} (checked in {time.perf_counter() - t0:.1f} s)")

    def _check_template(self) -> None:
        """Render the chat template once at load (in the bounded sandbox: the folder is
        untrusted) so a broken or hostile one is refused before anything is transcribed."""
        from as2d.runtime.llm.template import TemplateError, render_chat_template

        try:
            out = render_chat_template(self.chat_template,
                                       messages=[{"role": "user", "content": "\x00Q\x00"}],
                                       add_generation_prompt=True, bos_token="", eos_token="")
        except TemplateError as exc:
            raise HFModelError(f"{self._template_file}: {exc}") from None
        if "\x00Q\x00" not in out:
            raise HFModelError(f"{self._template_file}: the chat template does not show the "
                               "user's message")

    @staticmethod
    def _read_template(path: Path) -> str:
        """``chat_template.jinja`` (what transformers writes since 4.5x, and prefers to the
        ``chat_template`` of tokenizer_config.json), size-capped like the config files."""
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_TEMPLATE + 1)
            if len(raw) > MAX_TEMPLATE:
                raise HFModelError(f"{path.name}: larger than {MAX_TEMPLATE} bytes")
            return raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HFModelError(f"{path.name} cannot be read ({str(exc)[:200]})") from None

    def _check_config(self) -> None:
        """config.json's numbers and the tokenizer's ids against what the graph really takes
        and gives (one line naming the file and the field): a disagreeing folder would
        otherwise fail deep in onnxruntime (``INVALID_ARGUMENT``) or answer with another
        model's tokens."""
        cfg, shapes = self.config, {**{n: i.shape for n, i in self._inputs.items()},
                                    **{o.name: o.shape for o in self.session.get_outputs()}}

        def number(key: str):
            v = cfg.get(key)
            if v is None:
                return None
            if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 1 << 31:
                raise HFModelError(f"config.json: {key} is not a positive integer "
                                   f"({str(v)[:40]})")
            return v

        layers = number("num_hidden_layers") or number("n_layer")
        if layers is not None and layers != len(self._layers):
            raise HFModelError(f"config.json: num_hidden_layers is {layers} but the graph has "
                               f"{len(self._layers)} layers")
        heads, head_dim = self._kv_shape
        kv_heads = number("num_key_value_heads")
        if kv_heads is not None and kv_heads != heads:
            raise HFModelError(f"config.json: num_key_value_heads is {kv_heads} but the graph "
                               f"has {heads}")
        dim = number("head_dim")
        if dim is not None and dim != head_dim:
            raise HFModelError(f"config.json: head_dim is {dim} but the graph has {head_dim}")
        logits = (shapes.get("logits") or [None])[-1]
        vocab = number("vocab_size")
        if vocab is not None and isinstance(logits, int) and vocab != logits:
            raise HFModelError(f"config.json: vocab_size is {vocab} but the graph gives "
                               f"{logits} logits")
        rows = logits if isinstance(logits, int) else vocab
        if rows is not None:
            size = self.tokenizer.tok.get_vocab_size(with_added_tokens=True)
            if size > rows:
                raise HFModelError(f"tokenizer.json has {size} tokens but the model has "
                                   f"{rows} (another model's tokenizer?)")
            for what, tid in (("bos", self.bos), ("eos", self.eos),
                              ("end-of-turn", self.end_of_turn), *(
                                  ("stop", t) for t in self.stop_ids)):
                if tid is not None and not 0 <= tid < min(rows, max(size, 1)):
                    raise HFModelError(f"the {what} token id {tid} is outside the model's "
                                       f"vocabulary of {min(rows, size)}")

    # -- layout ---------------------------------------------------------------------------------
    def _cache_layout(self) -> list[tuple[str, str, str, str]]:
        """Per layer: (past key, past value, present key, present value) names."""
        layers = []
        i = 0
        while f"past_key_values.{i}.key" in self._inputs:
            names = (f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                     f"present.{i}.key", f"present.{i}.value")
            if names[1] not in self._inputs or not all(n in self._outputs for n in names[2:]):
                raise HFModelError(f"layer {i}: past_key_values / present names are incomplete")
            layers.append(names)
            i += 1
        if not layers:
            raise HFModelError("the graph has no past_key_values inputs: export it with the "
                               "KV cache (optimum: --task text-generation-with-past)")
        meta = self._inputs[layers[0][0]]
        shape = meta.shape
        if len(shape) != 4:
            raise HFModelError(f"past keys should be [batch, heads, length, head_dim], not "
                               f"{shape}")
        heads = shape[1] if isinstance(shape[1], int) else self.config.get(
            "num_key_value_heads", self.config.get("num_attention_heads"))
        head_dim = shape[3] if isinstance(shape[3], int) else self.config.get("head_dim") or (
            int(self.config["hidden_size"]) // int(self.config["num_attention_heads"])
            if "hidden_size" in self.config and "num_attention_heads" in self.config else None)
        if heads is None or head_dim is None:
            raise HFModelError("cannot tell the KV-cache shape (config.json lacks "
                               "num_key_value_heads / head_dim)")
        self._kv_shape = (int(heads), int(head_dim))
        self._kv_dtype = np.float16 if "float16" in meta.type else np.float32
        return layers

    # -- the CausalLM interface -----------------------------------------------------------------
    def _new_state(self) -> HFState:
        return HFState(self)


class HFState:
    """One sequence's KV cache: the last ``present`` arrays and how much of them is valid."""

    trees = False  # an optimum export takes sequences only

    def __init__(self, model: HFCausalLM) -> None:
        self.model = model
        self.capacity = model.capacity
        self.length = 0
        self._kv: list[tuple[np.ndarray, np.ndarray]] = []

    def reset(self) -> None:
        heads, hd = self.model._kv_shape
        empty = np.zeros((1, heads, 0, hd), self.model._kv_dtype)
        self._kv = [(empty, empty) for _ in self.model._layers]
        self.length = 0

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray:
        """Run ``tokens`` after the cached ones; logits ``[R, vocab]`` float32 of the last
        ``R = logit_rows`` tokens (all by default)."""
        n, t = self.length, len(tokens)
        if t == 0:
            raise ValueError("no tokens to run")
        if n + t > self.capacity:
            raise ValueError(f"LLM context is full ({n} + {t} > {self.capacity} tokens)")
        m = self.model
        feed = {"input_ids": np.asarray([tokens], dtype=np.int64),
                "attention_mask": np.ones((1, n + t), dtype=np.int64)}
        if "position_ids" in m._inputs:
            feed["position_ids"] = np.arange(n, n + t, dtype=np.int64)[None, :]
        if "use_cache_branch" in m._inputs:
            feed["use_cache_branch"] = np.array([n > 0])
        for (pk, pv, _, _), (k, v) in zip(m._layers, self._kv):
            # After a truncation the arrays are longer than the valid length.
            feed[pk] = k if k.shape[2] == n else np.ascontiguousarray(k[:, :, :n])
            feed[pv] = v if v.shape[2] == n else np.ascontiguousarray(v[:, :, :n])
        outs = dict(zip(m._outputs, m.session.run(m._outputs, feed)))
        self._kv = [(outs[ck], outs[cv]) for _, _, ck, cv in m._layers]
        self.length = n + t
        logits = outs["logits"][0]
        if logit_rows is not None:
            logits = logits[-logit_rows:]
        return logits.astype(np.float32, copy=False)

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} to {length}")
        self.length = length
