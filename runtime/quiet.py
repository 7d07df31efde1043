"""The dependencies' telemetry off: an offline tool leaves no identifiers and tries no network.

Measured on a plain ``as2d transcribe`` (fresh ``HOME`` and ``TMPDIR``, strace) before this
module existed:

* ``import onnxruntime`` (1.32, Linux wheels carry a 1DS telemetry client) wrote a 51-byte
  ``$TMPDIR/.ses`` (a time stamp and a GUID) and ``~/.cache/Microsoft/DeveloperTools/
  .onnxruntime/{deviceid,onnxruntime.db}``. ``ORT_DISABLE_TELEMETRY=1``, set before the first
  import, is onnxruntime's full opt-out outside Windows: no uploader, no events, no device id,
  no offline cache (and no ``.ses``). It is read once, when the library initialises, so
  :func:`quiet_dependencies` runs when the ``as2d`` package is imported; a process that
  imported onnxruntime earlier keeps what it chose, and :func:`quiet_onnxruntime` still turns
  its events off.
* ``import openvino`` (the encoder on AMX CPUs) imports its model converter, whose telemetry
  writes ``~/intel/openvino_ga_cid`` (a client id) and ``~/intel/stats`` and sends an "import"
  event (a DNS look-up was seen in strace). The converter falls back to its own no-op stub
  when ``openvino_telemetry`` cannot be imported; :func:`no_openvino_telemetry` makes that so
  while as2d imports OpenVINO, without writing OpenVINO's opt-out file (itself under
  ``~/intel``), and leaves the module importable afterwards for the rest of the process.
* Ray (``as2d batch``) reports usage statistics unless ``RAY_USAGE_STATS_ENABLED=0``.

A user's own setting of these variables is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

# Read by the libraries when they initialise; setdefault keeps a user's explicit choice.
QUIET_ENV = {
    "ORT_DISABLE_TELEMETRY": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def quiet_dependencies() -> None:
    """Set the dependencies' telemetry opt-outs in this process's environment (inherited by
    any child process) unless the user set them. Cheap: imports nothing."""
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)


def quiet_onnxruntime(ort) -> None:
    """Turn onnxruntime's telemetry events off (for a process that imported it before as2d
    could set ``ORT_DISABLE_TELEMETRY``); a no-op on builds without the switch."""
    disable = getattr(ort, "disable_telemetry_events", None)
    if disable is not None:
        with contextlib.suppress(Exception):
            disable()


@contextlib.contextmanager
def no_openvino_telemetry() -> Iterator[None]:
    """Import OpenVINO inside this block: its converter then binds its no-op telemetry stub
    (``openvino_telemetry`` reads as absent), so no client id is written and no event sent.
    Nothing changes when OpenVINO was already imported."""
    name = "openvino_telemetry"
    if "openvino" in sys.modules or name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment] - `import` raises ImportError
    try:
        yield
    finally:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]
