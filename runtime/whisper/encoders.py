"""Encoder back ends: the same Whisper encoder graph run by onnxruntime or by OpenVINO.

The encoder runs once per 30-s window and, on two cores, dominates end-to-end time. On CPUs with
AMX, OpenVINO runs our fp32 encoder graph in bf16 about 1.8× faster than onnxruntime runs the int8
one. Only the encoder moves: decoders stay in onnxruntime, whose row-exact kernels keep
speculative verification lossless. Target-only decoding and AS²D consume the same encoder
output, so they still give identical transcripts with either back end.

``auto`` (the default) picks OpenVINO when its wheel imports and the CPU reports ``amx_bf16``,
else onnxruntime. ``$AS2D_ENCODER`` overrides the default. Every back end takes
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

from as2d.runtime.quiet import no_openvino_telemetry
from as2d.runtime.sessions import cpu_flags, make_session

ENV_ENCODER = "AS2D_ENCODER"
ENV_OV_PRECISION = "AS2D_OPENVINO_PRECISION"  # bf16, f32 or f16; default: bf16 on AMX
BACKENDS = ("auto", "onnxruntime", "openvino")
OV_CACHE_FOLDER = ".openvino_cache"  # inside the bundle folder


class EncoderError(RuntimeError):
    """The chosen encoder back end cannot be used here (the message says why)."""


class EncoderCancelled(RuntimeError):
    """An encoder run was abandoned because its ``run_options.terminate`` flag was set."""


class Encoder(Protocol):
    backend: str  # "onnxruntime" or "openvino"
    detail: str  # precision and the like, for logs and benchmarks
    output_names: list[str]

    def run(self, mel: np.ndarray, run_options=None) -> dict[str, np.ndarray]: ...


# -- choosing ---------------------------------------------------------------------------------

def requested_backend(encoder: str | None = None) -> str:
    """``encoder`` if given, else ``$AS2D_ENCODER``, else ``auto``; checked."""
    choice = (encoder or os.environ.get(ENV_ENCODER) or "auto").strip().lower()
    if choice not in BACKENDS:
        where = "encoder" if encoder else ENV_ENCODER
        raise EncoderError(f"{where} must be one of {', '.join(BACKENDS)}, not {choice!r}")
    return choice


def has_amx_bf16(flags: frozenset[str] | None = None) -> bool:
    return "amx_bf16" in (cpu_flags() if flags is None else flags)


def openvino_available() -> bool:
    try:
        with no_openvino_telemetry():  # no client id under ~/intel, no event
            import openvino  # noqa: F401
    except Exception:  # ImportError, or a wheel that fails to load its libraries
        return False
    return True


def auto_backend(flags: frozenset[str] | None = None) -> str:
    """OpenVINO where it is installed and the CPU has AMX bf16, else onnxruntime.

    Measured on a Sapphire Rapids guest that exposes ``avx512_bf16`` but not AMX: OpenVINO bf16
    was slower than onnxruntime int8 there (and OpenVINO f32 no faster), so AVX-512 bf16 alone
    does not select OpenVINO."""
    return "openvino" if has_amx_bf16(flags) and openvino_available() else "onnxruntime"


def default_precision(flags: frozenset[str] | None = None) -> str:
    """OpenVINO inference precision: ``$AS2D_OPENVINO_PRECISION`` if set, else bf16 on AMX,
    else f32 (bf16 without AMX is slower)."""
    env = os.environ.get(ENV_OV_PRECISION, "").strip().lower()
    if env:
        return env
    return "bf16" if has_amx_bf16(flags) else "f32"


# -- onnxruntime ------------------------------------------------------------------------------

class OrtEncoder:
    backend = "onnxruntime"

    def __init__(self, path: str | Path, threads: int, spin: bool = False) -> None:
        self.path = Path(path)
        self.session = make_session(self.path, threads, spin)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.detail = "onnxruntime"

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
        return _core


def ov_cache_dir(bundle_dir: Path, tag: str) -> Path | None:
    """Where OpenVINO keeps compiled blobs: inside the bundle when it is writable, else in the
    user cache (one folder per bundle ``tag``); None when neither can be written."""
    candidates = [Path(bundle_dir) / OV_CACHE_FOLDER]
    try:
        from platformdirs import user_cache_dir

        candidates.append(Path(user_cache_dir("as2d", appauthor=False)) / "openvino" / tag)
    except Exception:  # pragma: no cover - platformdirs is a dependency
        pass
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK | os.X_OK):
            return d
    return None


class OpenVINOEncoder:
    """The fp32 encoder graph compiled by OpenVINO's CPU plugin.

    One compile with a dynamic frame axis serves every input length: measured, a new length
    costs no recompilation and a static 3000-frame compile is no faster. Compiled blobs go to
    ``cache_dir`` (OpenVINO's ``CACHE_DIR``), so later processes load in a fraction of the
    compile time. Inference requests are pooled, so two threads may encode at once.
    """

    backend = "openvino"

    def __init__(self, path: str | Path, threads: int, precision: str | None = None,
                 cache_dir: Path | None = None) -> None:
        self.path = Path(path)
        self.precision = precision or default_precision()
        if self.precision not in ("bf16", "f32", "f16"):
            raise EncoderError(f"unknown OpenVINO precision {self.precision!r}")
        config = {
            "INFERENCE_PRECISION_HINT": self.precision,
            "INFERENCE_NUM_THREADS": max(1, int(threads)),
            "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY",
            # The cores are shared with onnxruntime's pools (decoders, the other model): pinned
            # threads would fight them.
            "ENABLE_CPU_PINNING": False,
        }
        if cache_dir is not None:
            config["CACHE_DIR"] = str(cache_dir)
        self.cache_dir = cache_dir
        try:
            # Compiling from the path lets a cache hit skip reading and hashing the graph.
            self.compiled = _ov_core().compile_model(str(self.path), "CPU", config)
        except Exception as exc:
            why = str(exc).strip()
            why = why.splitlines()[-1][:200] if why else type(exc).__name__
            raise EncoderError(f"OpenVINO cannot compile {self.path.name} ({why})") from None
        self._outputs = [(o.get_any_name(), o) for o in self.compiled.outputs]
        self.output_names = [name for name, _ in self._outputs]
        self.detail = f"openvino {self.precision}"
        self._free: list = []
        self._lock = threading.Lock()

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
        return out

    @staticmethod
    def _run_cancellable(request, feed: dict, run_options) -> None:
        """Run ``request``; abandon it when onnxruntime-style ``run_options.terminate`` is set
        (checked every 10 ms), like onnxruntime does for its own sessions."""
        if getattr(run_options, "terminate", False):
            raise EncoderCancelled("encoder run abandoned (terminate flag set)")
        request.start_async(feed)
        while not request.wait_for(10):
            if getattr(run_options, "terminate", False):
                request.cancel()
                try:
                    request.wait()
                except Exception:
                    pass
                raise EncoderCancelled("encoder run abandoned (terminate flag set)")


# -- factory ----------------------------------------------------------------------------------

def make_encoder(bundle_dir: str | Path, manifest: dict, threads: int,
                 encoder: str | None = None, fp32_path: Callable[[], Path] | None = None,
                 warn: Callable[[str], None] | None = None, spin: bool = False) -> Encoder:
    """The encoder of a bundle on the requested back end (``spin``: see
    :func:`as2d.runtime.sessions.make_session`).

    ``fp32_path`` returns the bundle's fp32 encoder graph, making it if need be (int8 bundles
    made before it was part of them); OpenVINO compiles that graph. With ``auto``, any problem
    with OpenVINO falls back to onnxruntime (``warn`` is told why); an explicit ``openvino``
    raises :class:`EncoderError` instead.
    """
    bundle_dir = Path(bundle_dir)
    choice = requested_backend(encoder)
    backend = auto_backend() if choice == "auto" else choice
    if backend == "openvino":
        try:
            return _openvino_encoder(bundle_dir, manifest, threads, fp32_path)
        except EncoderError as exc:
            if choice != "auto":
                raise
            if warn:
                warn(f"OpenVINO encoder unavailable ({exc}); using onnxruntime")
    return OrtEncoder(bundle_dir / manifest["files"]["encoder"], threads, spin)


def _openvino_encoder(bundle_dir: Path, manifest: dict, threads: int,
                      fp32_path: Callable[[], Path] | None) -> OpenVINOEncoder:
    if not openvino_available():
        raise EncoderError("the openvino package is not installed (pip install openvino)")
    files = manifest["files"]
    if manifest.get("precision") == "fp32" or files.get("encoder_fp32"):
        path = bundle_dir / files.get("encoder_fp32", files["encoder"])
    elif fp32_path is not None:
        try:
            path = Path(fp32_path())
        except Exception as exc:  # BundleError/SourceError: message says how to fix it
            raise EncoderError(f"no fp32 encoder for OpenVINO: {exc}") from None
    else:
        raise EncoderError(f"{bundle_dir.name} has no fp32 encoder for OpenVINO")
    if not path.is_file():
        raise EncoderError(f"{path} is missing; reinstall the model with --force")
    sha = manifest.get("sha256", {}).get(path.name, "")
    if not sha:  # just made: the manifest on disk has its digest
        try:
            sha = json.loads((bundle_dir / "manifest.json").read_text())["sha256"][path.name]
        except (OSError, ValueError, KeyError, TypeError):
            sha = ""
    cache = ov_cache_dir(bundle_dir, f"{bundle_dir.name}-{sha[:16] or 'unknown'}")
    return OpenVINOEncoder(path, threads, cache_dir=cache)
