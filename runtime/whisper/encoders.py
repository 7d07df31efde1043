"""Encoder back ends: the same Whisper encoder graph run by onnxruntime or by OpenVINO.

The encoder runs once per 30-s window and, on two cores, dominates end-to-end time. Which back
end runs it fastest depends on the CPU and the libraries, and no CPU flag predicts it (see
:mod:`.encoder_choice`): ``auto`` (the default) times the candidates once per machine and model
and remembers its choice, for every thread count and across re-installs. Only the encoder
moves: decoders stay in onnxruntime, whose row-exact kernels keep speculative verification
lossless. Back ends differ in the last bits of their outputs, which can flip a near-tie between
two words, so one choice per machine and model is what keeps the words the same: target-only
decoding and AS²D, ``-t 1`` and ``-t 2``, ``transcribe`` and ``batch`` consume the same encoder
output and give identical transcripts with any back end.

``$AS2D_ENCODER`` (or ``encoder=``) overrides ``auto``; ``$AS2D_OPENVINO_PRECISION`` fixes what
OpenVINO computes in (else that is measured too). OpenVINO runs the fp32 graph in f32, a copy
with fp16 weights in bf16 (f16 when asked; the fp32 graph where the copy cannot be made), and,
for an int8 bundle, ``int8``: a graph holding the bundle's own int8
weights, whose products OpenVINO computes in integers from activations it quantises per group
of :data:`OV_INT8_GROUP` values along each row (finer than the bundle's one scale per row, so
closer to fp32 than onnxruntime's int8 graph), everything else in bf16. Every back end takes
``mel [1, n_mels, frames]`` (any even ``frames`` ≤ 3000: drafters encode only the audio that is
there) and returns the graph's outputs by name, ``cross_k_i``/``cross_v_i`` as float32.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from as2d.runtime.files import user_cache, writable_folder
from as2d.runtime.quiet import no_openvino_telemetry
from as2d.runtime.sessions import drop_file_pages, make_session
from as2d.runtime.whisper.encoder_choice import (
    EncoderCandidate,
    EncoderChoice,
    choose,
    short_reason,
)

ENV_ENCODER = "AS2D_ENCODER"
ENV_OV_PRECISION = "AS2D_OPENVINO_PRECISION"  # bf16, f32, f16 or int8; default: measured
BACKENDS = ("auto", "onnxruntime", "openvino")
# What auto times for every bundle (int8 too for an int8 bundle; f16 only when asked: few CPUs
# compute it), and every precision that may be asked for.
OV_PRECISIONS = ("f32", "bf16")
OV_ASKABLE = ("bf16", "f32", "f16", "int8")
# The graph each precision compiles (as2d.models.install.OPENVINO_GRAPHS makes them): the fp32
# graph, the fp16-weight graph (half the memory where the kernels compute in 16 bits anyway),
# or the int8-weight graph (int8 bundles only).
OV_GRAPH_KIND = {"bf16": "f16w", "f32": "fp32", "f16": "f16w", "int8": "int8w"}
# Activation values per quantisation group in OpenVINO's int8 products. Base's encoder on a
# 2-core Zen 4, one 30-s window, interleaved (relative distance of the output from fp32):
# bf16 293 ms (0.018); int8 with groups of 32 280 ms (0.037), 64 250 ms (0.040), 128 244 ms
# (0.046); onnxruntime's int8 graph 294 ms (0.062). 64: nearly all the speed, less of the error.
OV_INT8_GROUP = 64
OV_CACHE_FOLDER = ".openvino_cache"  # inside the bundle folder


class EncoderError(RuntimeError):
    """The chosen encoder back end cannot be used here (the message says why)."""


class EncoderCancelled(RuntimeError):
    """An encoder run was abandoned because its ``run_options.terminate`` flag was set."""


class Encoder(Protocol):
    backend: str  # "onnxruntime" or "openvino"
    detail: str  # back end and precision ("onnxruntime int8", "openvino bf16")
    output_names: list[str]
    mel_bands: int | None  # the mel bands its graph takes (None: a dynamic axis)
    choice: EncoderChoice | None  # how make_encoder chose it (None: built to be measured)

    def run(self, mel: np.ndarray, run_options=None) -> dict[str, np.ndarray]: ...


# -- choosing ---------------------------------------------------------------------------------

def requested_backend(encoder: str | None = None) -> str:
    """``encoder`` if given, else ``$AS2D_ENCODER``, else ``auto``; checked."""
    choice = (encoder or os.environ.get(ENV_ENCODER) or "auto").strip().lower()
    if choice not in BACKENDS:
        where = "encoder" if encoder else ENV_ENCODER
        raise EncoderError(f"{where} must be one of {', '.join(BACKENDS)}, not {choice!r}")
    return choice


def requested_precision() -> str | None:
    """``$AS2D_OPENVINO_PRECISION`` (one of :data:`OV_ASKABLE`), checked; None: measured."""
    env = os.environ.get(ENV_OV_PRECISION, "").strip().lower()
    if env and env not in OV_ASKABLE:
        raise EncoderError(f"{ENV_OV_PRECISION} must be {', '.join(OV_ASKABLE[:-1])} or "
                           f"{OV_ASKABLE[-1]}, not {env!r}")
    return env or None


def openvino_installed() -> bool:
    """Is the ``openvino`` distribution installed? Read from its metadata, without importing it:
    ``import openvino`` costs about a second, which a remembered onnxruntime choice must not pay
    (a broken install is found when the candidate is built, and skipped there)."""
    from importlib.util import find_spec

    return find_spec("openvino") is not None


def openvino_available() -> bool:
    try:
        with no_openvino_telemetry():  # no client id under ~/intel, no event
            import openvino  # noqa: F401
    except Exception:  # ImportError, or a wheel that fails to load its libraries
        return False
    return True


# -- onnxruntime ------------------------------------------------------------------------------

class OrtEncoder:
    backend = "onnxruntime"
    choice: EncoderChoice | None = None

    def __init__(self, path: str | Path, threads: int, spin: bool = False,
                 precision: str = "") -> None:
        self.path = Path(path)
        self.session = make_session(self.path, threads, spin)
        self.output_names = [o.name for o in self.session.get_outputs()]
        bands = self.session.get_inputs()[0].shape[1]
        self.mel_bands = bands if isinstance(bands, int) else None
        self.precision = precision
        self.detail = f"onnxruntime {precision}".strip()

    def run(self, mel: np.ndarray, run_options=None) -> dict[str, np.ndarray]:
        outs = self.session.run(self.output_names,
                                {"mel": np.ascontiguousarray(mel, dtype=np.float32)},
                                run_options)
        return dict(zip(self.output_names, outs))


# -- OpenVINO ---------------------------------------------------------------------------------

_core = None
_core_lock = threading.Lock()


def _ov_core():
    global _core
    with _core_lock:
        if _core is None:
            with no_openvino_telemetry():
                import openvino as ov

            _core = ov.Core()
            # OpenVINO's Python binding initialises a static on the first read of a tensor's
            # data and takes the GIL inside it: two threads reading their first tensors at
            # once (the target's encoder ahead and the drafter's, on a process's first
            # window) could each wait for the other for ever (4 of 60 fresh processes hung:
            # bench/results/ov-first-run-race-xeon-2026-12-07.json). The first read is made
            # here, under the lock.
            ov.Tensor(np.zeros(1, np.float32)).data  # noqa: B018
        return _core


def ov_cache_dir(bundle_dir: Path, tag: str) -> Path | None:
    """Where OpenVINO keeps compiled blobs: inside the bundle when it is writable, else in the
    user cache (one folder per bundle ``tag``); None when neither can be written."""
    return writable_folder(Path(bundle_dir) / OV_CACHE_FOLDER) or user_cache("openvino", tag)


class OpenVINOEncoder:
    """An encoder graph compiled by OpenVINO's CPU plugin: the fp32 graph in f32, the
    fp16-weight graph in bf16 or f16, or (precision ``int8``) the int8-weight graph with
    dynamically quantised activations.

    One compile with a dynamic frame axis serves every input length: measured, a new length
    costs no recompilation and a static 3000-frame compile is no faster. Compiled blobs go to
    ``cache_dir`` (OpenVINO's ``CACHE_DIR``), so later processes load in a fraction of the
    compile time. Inference requests are pooled, so two threads may encode at once.
    """

    backend = "openvino"
    choice: EncoderChoice | None = None

    def __init__(self, path: str | Path, threads: int, precision: str,
                 cache_dir: Path | None = None) -> None:
        self.path = Path(path)
        self.precision = precision  # the graph must be the one OV_GRAPH_KIND names for it
        if self.precision not in OV_ASKABLE:
            raise EncoderError(f"unknown OpenVINO precision {self.precision!r}")
        config = {
            # int8: the products in integers (the weights are int8 in the graph), the rest
            # (attention, normalisation, convolutions) in bf16 where the CPU computes it
            # (OpenVINO keeps f32 where it does not); a CPU that computes bf16 slowly loses
            # the measurement, as plain bf16 does there.
            "INFERENCE_PRECISION_HINT": "bf16" if self.precision == "int8" else self.precision,
            "INFERENCE_NUM_THREADS": max(1, int(threads)),
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            # The cores are shared with onnxruntime's pools (decoders, the other model): pinned
            # threads would fight them.
            "ENABLE_CPU_PINNING": False,
        }
        if self.precision == "int8":
            config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = OV_INT8_GROUP
        if cache_dir is not None:
            # One folder per precision (and int8 group size): OpenVINO 2026.4 keys a blob
            # compiled from a path without its INFERENCE_PRECISION_HINT, so a bf16 compile
            # loaded the f32 blob (and crashed running it) and an f32 compile the bf16 one; its
            # CPU plugin names no other compile setting as part of the key either.
            cache_dir = writable_folder(Path(cache_dir) / (
                f"int8-g{OV_INT8_GROUP}" if self.precision == "int8" else self.precision))
        if cache_dir is not None:
            config["CACHE_DIR"] = str(cache_dir)
        self.cache_dir = cache_dir
        try:
            # Compiling from the path lets a cache hit skip reading and hashing the graph.
            self.compiled = _ov_core().compile_model(str(self.path), "CPU", config)
        except Exception as exc:
            raise EncoderError(f"OpenVINO cannot compile {self.path.name} "
                               f"({short_reason(exc)})") from None
        self._outputs = [(o.get_any_name(), o) for o in self.compiled.outputs]
        self.output_names = [name for name, _ in self._outputs]
        bands = self.compiled.inputs[0].get_partial_shape()[1]
        self.mel_bands = bands.get_length() if bands.is_static else None
        self.detail = f"openvino {self.precision}"
        self._free: list = []
        self._lock = threading.Lock()
        # What OpenVINO maps to build its weights (its cache blob, the graph and its weights
        # file): given back after the first run (as2d.runtime.sessions.drop_file_pages).
        self._sources = [p for p in (cache_dir, self.path, self.path.with_suffix(".bin"))
                         if p is not None]

    def run(self, mel: np.ndarray, run_options=None) -> dict[str, np.ndarray]:
        with self._lock:
            request = self._free.pop() if self._free else self.compiled.create_infer_request()
        try:
            feed = {"mel": np.ascontiguousarray(mel, dtype=np.float32)}
            if run_options is None:
                request.infer(feed)
            else:
                self._run_cancellable(request, feed, run_options)
            # Copies: the request's buffers are reused by its next run.
            out = {name: np.array(request.get_tensor(port).data, dtype=np.float32, copy=True)
                   for name, port in self._outputs}
        except BaseException:
            request = None  # a cancelled or failed request is not reused
            raise
        finally:
            if request is not None:
                with self._lock:
                    self._free.append(request)
        sources, self._sources = self._sources, []
        if sources:  # its weights are built by now
            drop_file_pages(*sources)
        return out

    @staticmethod
    def _run_cancellable(request, feed: dict, run_options) -> None:
        """Run ``request``; abandon it when ``run_options.terminate`` (an onnxruntime
        ``RunOptions``) is set (checked every 10 ms), like onnxruntime does for its own
        sessions."""
        if run_options.terminate:
            raise EncoderCancelled("encoder run abandoned (terminate flag set)")
        request.start_async(feed)
        while not request.wait_for(10):
            if run_options.terminate:
                request.cancel()
                try:
                    request.wait()
                except Exception:
                    pass
                raise EncoderCancelled("encoder run abandoned (terminate flag set)")


# -- factory ----------------------------------------------------------------------------------

def model_identity(manifest: dict, bundle_dir: str | Path | None = None) -> dict:
    """What a bundle's encoder is, whatever folder holds it: its graph's sha256 and the
    converter version that made it (and the graphs OpenVINO compiles, made from the same
    weights). The same weights re-installed are the same model; the key of ``auto``'s choice
    (:func:`as2d.runtime.whisper.encoder_choice.key`). A manifest without the graph's digest
    is named by its folder instead."""
    enc_file = manifest["files"]["encoder"]
    sha = manifest.get("sha256", {}).get(enc_file, "")
    if not sha and bundle_dir is not None:
        sha = f"folder {Path(bundle_dir).resolve()}"
    return {"encoder": sha,
            "converter": manifest.get("converter_version"),
            "precision": manifest.get("precision", "fp32")}



def make_encoder(bundle_dir: str | Path, manifest: dict, threads: int,
                 encoder: str | None = None, ov_graph: Callable[[str], Path] | None = None,
                 warn: Callable[[str], None] | None = None, spin: bool = False,
                 name: str | None = None) -> Encoder:
    """The encoder of a bundle on the requested back end (``spin``: see
    :func:`as2d.runtime.sessions.make_session`); its ``choice`` says how it was chosen.

    ``onnxruntime`` runs the bundle's own graph. ``openvino`` compiles the graph of
    ``$AS2D_OPENVINO_PRECISION`` (:data:`OV_GRAPH_KIND`), else of whichever of f32, bf16 and
    (int8 bundles) int8 is fastest here (measured once). ``auto`` measures the bundle's
    onnxruntime graph against OpenVINO (where it imports) once per machine and model, for every
    thread count, and keeps the fastest by a clear margin
    (:mod:`.encoder_choice`; ``warn`` says once that it is measuring, and why a candidate was
    left out). ``ov_graph(kind)`` returns the bundle's graph that OpenVINO compiles, ``fp32``
    ``f16w`` or ``int8w`` (:data:`OV_GRAPH_KIND`), making it if need be (bundles made before it was
    part of them). An explicit ``openvino`` that cannot run raises :class:`EncoderError`;
    under ``auto``, onnxruntime serves instead (``warn`` says why).
    """
    bundle_dir = Path(bundle_dir)
    asked = requested_backend(encoder)
    precision = requested_precision()  # checked whatever is asked: a bad value is an error
    graphs = _OvGraphs(bundle_dir, manifest, ov_graph)
    ort_choice = EncoderChoice(f"onnxruntime {manifest.get('precision', 'fp32')}", "asked")
    try:
        choice = ort_choice if asked == "onnxruntime" else _choice(
            asked, precision, bundle_dir, manifest, graphs, warn, name)
        # Built afresh: measured with its own thread count, and freed.
        enc = _build(choice.candidate, bundle_dir, manifest, threads, spin, graphs)
    except EncoderError as exc:
        if asked != "auto":
            raise
        if warn:
            warn(f"{exc}; using onnxruntime")
        choice = ort_choice
        enc = _build(choice.candidate, bundle_dir, manifest, threads, spin, graphs)
    enc.choice = choice
    return enc


def _choice(asked: str, precision: str | None, bundle_dir: Path, manifest: dict,
            graphs: _OvGraphs, warn: Callable[[str], None] | None, name: str | None
            ) -> EncoderChoice:
    """``auto``'s or ``openvino``'s choice (OpenVINO in ``precision``, else in each it may
    run): the only candidate there is, or the one measured (or remembered) among them;
    EncoderError when none can serve."""
    bundle_precision = manifest.get("precision", "fp32")
    name = name or manifest.get("model", bundle_dir.name)
    candidates = [EncoderCandidate("onnxruntime", bundle_precision)] if asked == "auto" else []
    has_ov = openvino_available() if asked == "openvino" else openvino_installed()
    if asked == "openvino" and not has_ov:
        raise EncoderError("the openvino package is not installed (pip install openvino)")
    if has_ov and precision == "int8" and bundle_precision != "int8":
        # OpenVINO's int8 runs an int8 bundle's weights; the user of an fp32 one chose fp32.
        why = f"{name} is an {bundle_precision} model: OpenVINO's int8 runs an int8 model's weights"
        if asked == "openvino":
            raise EncoderError(f"{why} (install it with --precision int8, or set "
                               f"{ENV_OV_PRECISION} to bf16 or f32)")
        if warn:
            warn(f"{why}; its encoder runs in onnxruntime")
        has_ov = False
    if has_ov:  # int8 is timed only for an int8 bundle (see above)
        timed = OV_PRECISIONS + (("int8",) if bundle_precision == "int8" else ())
        candidates += [EncoderCandidate("openvino", p) for p in ([precision] if precision
                                                                 else timed)]
    if len(candidates) == 1:  # nothing to measure
        return EncoderChoice(candidates[0].name, "asked")
    # Compile settings a candidate's speed (and its thread check) depends on beyond its name:
    # a choice remembered for another graph is measured and checked again.
    settings: dict = {}
    if EncoderCandidate("openvino", "int8") in candidates:
        settings["openvino int8 group"] = OV_INT8_GROUP
    if any(c.backend == "openvino" and OV_GRAPH_KIND[c.precision] == "f16w"
           for c in candidates):
        settings["openvino bf16/f16 weights"] = "fp16"

    def build(c: EncoderCandidate, n: int):  # as measured: never spinning
        return _build(c, bundle_dir, manifest, n, False, graphs)

    try:
        choice = choose(bundle_dir, candidates, model_identity(manifest, bundle_dir), build,
                        int(manifest["dims"]["n_mels"]), note=warn, model_name=name,
                        settings=settings)
    except RuntimeError as exc:
        raise EncoderError(str(exc)) from None
    if choice.how == "measured" and choice.skipped and warn:
        warn("encoder back ends left out: " + "; ".join(f"{n} ({why})" for n, why in
                                                        choice.skipped.items()))
    return choice


def _build(c: EncoderCandidate, bundle_dir: Path, manifest: dict, threads: int, spin: bool,
           graphs: _OvGraphs):
    if c.backend == "onnxruntime":
        return OrtEncoder(bundle_dir / manifest["files"]["encoder"], threads, spin, c.precision)
    try:  # imported quietly before a graph is made with it (ensure_encoder_f16w)
        _ov_core()
    except Exception as exc:  # noqa: BLE001 - a broken wheel: this back end cannot serve
        raise EncoderError(f"OpenVINO cannot start ({type(exc).__name__}: {exc})") from None
    kind = OV_GRAPH_KIND[c.precision]
    if kind == "f16w":
        fp32 = graphs.get("fp32")  # the copy's source, and what compiles where it cannot be
        try:  # made (a read-only bundle, as 0.2.0 compiled every bf16 encoder)
            path, cache = graphs.get(kind)
        except EncoderError:
            path, cache = fp32
    else:
        path, cache = graphs.get(kind)
    return OpenVINOEncoder(path, threads, c.precision, cache_dir=cache)


# The graphs OpenVINO compiles, by kind: the manifest's file key, and what the kind is.
_OV_GRAPH_FILES = {"fp32": ("encoder_fp32", "fp32 encoder"),
                   "f16w": ("encoder_f16w", "fp16-weight encoder"),
                   "int8w": ("encoder_int8w", "int8-weight encoder")}


class _OvGraphs:
    """The graphs OpenVINO compiles (fp32; fp16 weights; int8 weights) and their blob cache,
    each found (or made) once."""

    def __init__(self, bundle_dir: Path, manifest: dict,
                 make: Callable[[str], Path] | None) -> None:
        self.bundle_dir, self.manifest, self.make = bundle_dir, manifest, make
        self._found: dict[str, tuple[Path, Path | None] | EncoderError] = {}

    def get(self, kind: str) -> tuple[Path, Path | None]:
        if kind not in self._found:
            try:
                self._found[kind] = self._find(kind)
            except EncoderError as exc:  # not tried again (making a graph may be slow)
                self._found[kind] = exc
        found = self._found[kind]
        if isinstance(found, EncoderError):
            raise found
        return found

    def _find(self, kind: str) -> tuple[Path, Path | None]:
        bundle_dir, manifest = self.bundle_dir, self.manifest
        files = manifest["files"]
        file_key, what = _OV_GRAPH_FILES[kind]
        if kind == "fp32" and manifest.get("precision") == "fp32":
            path = bundle_dir / files["encoder"]
        elif files.get(file_key):
            path = bundle_dir / files[file_key]
        elif self.make is not None:
            try:
                path = Path(self.make(kind))
            except Exception as exc:  # BundleError/SourceError: message says how to fix it
                raise EncoderError(f"no {what} for OpenVINO: {exc}") from None
        else:
            raise EncoderError(f"{bundle_dir.name} has no {what} for OpenVINO")
        if not path.is_file():
            raise EncoderError(f"{path} is missing; reinstall the model with --force")
        sha = manifest.get("sha256", {}).get(path.name, "")
        if not sha:  # just made: the manifest on disk has its digest
            try:
                sha = json.loads((bundle_dir / "manifest.json").read_text())["sha256"][path.name]
            except (OSError, ValueError, KeyError, TypeError):
                sha = ""
        return path, ov_cache_dir(bundle_dir, f"{bundle_dir.name}-{sha[:16] or 'unknown'}")
