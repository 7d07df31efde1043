"""as2d: fast offline transcription and audio question answering on the CPU, with AS²D.

The public API (see :mod:`as2d.api`)::

    import as2d

    segments, info = as2d.transcribe("talk.wav")
    answer = as2d.ask("talk.wav", "Who does she thank?")
    with as2d.Transcriber(model="base", drafter="tiny.en") as t: ...

The package's rooms: ``as2d.runtime`` (the engine: Whisper, speculative decoding, live
dictation, question answering; no terminal), ``as2d.models`` (where models come from),
``as2d.cli`` (the command line), ``as2d.loading`` (names → loaded models). Importing ``as2d``
is cheap: the API's names load their modules when first used, so ``import as2d.runtime.x``
does not drag in the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from as2d.runtime.quiet import quiet_dependencies

# Before anything imports onnxruntime: its telemetry opt-out is read once, at import.
quiet_dependencies()

__all__ = ["Transcriber", "transcribe", "ask", "diarize", "Segment", "TranscriptionInfo",
           "__version__"]

if TYPE_CHECKING:
    from as2d.api import Segment, Transcriber, TranscriptionInfo, ask, diarize, transcribe


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # One place holds the version: pyproject.toml, read back from the installed package's
        # metadata (what `pip show as2d` and `as2d --version` say).
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("as2d")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    if name in __all__:
        from as2d import api

        return getattr(api, name)
    raise AttributeError(f"module 'as2d' has no attribute {name!r}")
