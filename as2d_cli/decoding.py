"""Wiring of a decode: thread plan, target, drafter and the per-run decoder.

Shared by the command line and the Python API, so neither knows the other; nothing here touches
a terminal. The engine (``as2d.runtime``) supplies the parts; this module decides which parts a
``decoder`` name means and how many threads each session gets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from as2d.loading import load_whisper
from as2d.runtime.events import Listener
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.transcribe.as2d import AS2D
from as2d.runtime.transcribe.sd import SerialSD
from as2d.runtime.transcribe.strategy import DecodeStrategy, TargetOnly


class Decoder(StrEnum):
    """How a run decodes: ``as2d`` (drafter and target concurrently), ``sd`` (classic serial
    speculative decoding) or ``target`` (the target alone). All three give the same text.

    A ``StrEnum``, so a member is also the plain string the engine and the JSON outputs use.
    """

    AS2D = "as2d"
    SD = "sd"
    TARGET = "target"

    @classmethod
    def parse(cls, value: str) -> Decoder:
        """``value`` as a Decoder; ValueError with a one-line message otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"--decoder must be as2d, sd or target, not {value!r}") from None


@dataclass(frozen=True)
class ThreadPlan:
    total: int
    target: int  # target encoder and decoder
    drafter: int
    busy: int | None = None  # target decoder threads while the drafter still works
    spin: bool = False  # the target's sessions have the cores to themselves

    def as_dict(self) -> dict:
        return {"total": self.total, "target": self.target, "drafter": self.drafter,
                "target_while_drafting": self.busy or self.target}


def plan_threads(total: int, decoder: Decoder | str, drafter_threads: int = 0) -> ThreadPlan:
    """Threads per session. The target always gets every core for its encoder and decoder
    (as target-only does, so the comparison is honest); the drafter gets one thread unless
    told otherwise."""
    total = max(1, total)
    if decoder == "target":  # alone: its pools spin (as2d.runtime.sessions)
        return ThreadPlan(total, total, 0, spin=True)
    if decoder == "sd":  # serial: each model has every core while it runs
        return ThreadPlan(total, total, drafter_threads or total)
    drafter = max(1, drafter_threads or 1)
    return ThreadPlan(total, total, drafter, max(1, total - drafter))


def fixed_budget(budget: int | str | None) -> int | None:
    """Candidates per pass: a number, or None for the adaptive budget (``auto``)."""
    return None if budget in (None, "auto") else int(budget)


def drafter_loader(decoder: Decoder | str, drafter: str, plan: ThreadPlan,
                   models_dir: str | Path | None, note: Callable[[str], None],
                   encoder: str | None = None) -> Callable[[str, int], object] | None:
    """Start loading the drafter now, on a background thread, so that it overlaps the loading
    of the target (onnxruntime builds sessions without the GIL); returns the ``load_drafter``
    of :func:`build_decoder`, which waits for it (and raises its error). None: no drafter."""
    if decoder == "target":
        return None
    from as2d.runtime.sessions import Background

    pending = Background(lambda: load_whisper(drafter, None, models_dir, plan.drafter,
                                              progress=note, role="drafter", encoder=encoder))

    def load(spec: str, threads: int):
        if spec == drafter and threads == plan.drafter:
            return pending.result()
        return load_whisper(spec, None, models_dir, threads, progress=note, role="drafter",
                            encoder=encoder)

    def settle() -> None:
        """Wait for the load, whatever its outcome, when the drafter will not be used (the
        target failed to load, or decodes alone): no loading thread may be inside
        onnxruntime when the process exits."""
        try:
            pending.result()
        except BaseException:  # noqa: BLE001 - not needed: neither is its error
            pass

    load.settle = settle
    return load


def exact_rows(target) -> bool:
    """Does ``target`` compute each decoder row the same whatever the rows in the pass (what
    speculation needs to be lossless)? Checked on the model (about 0.5 s for base), and for an
    as2d bundle remembered per decoder graph (its sha256), onnxruntime version and CPU, so a
    new onnxruntime or machine is checked again, once."""
    check = getattr(target, "check_exact_rows", None)
    if check is None:
        return True
    manifest = getattr(target, "manifest", None)
    decoder = getattr(target, "_decoder_file", None)
    digest = manifest.get("sha256", {}).get(decoder) if isinstance(manifest, dict) else None
    if not digest:
        return check()  # a Hugging Face folder: checked on every load
    from as2d.models.bundle import remembered_check
    from as2d.runtime.sessions import runtime_identity

    key = f"{digest}|{runtime_identity()}"
    return remembered_check(key, check)


def build_decoder(decoder: Decoder | str, target, drafter: str, budget: int | str | None,
                  plan: ThreadPlan, models_dir: str | Path | None, listener: Listener | None,
                  note: Callable[[str], None],
                  load_drafter: Callable[[str, int], object] | None = None,
                  encoder: str | None = None) -> DecodeStrategy:
    """The per-run decoder for ``decoder``. ``load_drafter(spec, threads)`` loads the drafter
    (default: from the model cache, with the ``encoder`` back end); ``budget`` is a number, or
    ``auto``/None (adaptive)."""
    if decoder == "target":
        return TargetOnly(target, listener)
    if not exact_rows(target):
        # Verifying k tokens in one pass must give what k single passes give; this graph
        # (not written by as2d) rounds differently, so speculation could change the text.
        note(f"{target.name}: this model's graph does not compute rows independently, so "
             f"speculative decoding could change its output; decoding with the target alone")
        return TargetOnly(target, listener)
    if load_drafter is None:
        def load_drafter(spec: str, threads: int):
            return load_whisper(spec, None, models_dir, threads, progress=note, role="drafter",
                                encoder=encoder)
    draft_model = load_drafter(drafter, plan.drafter)
    fixed = fixed_budget(budget)
    if decoder == "as2d":
        return AS2D(target, draft_model, listener, Budget(fixed=fixed), busy_threads=plan.busy)
    return SerialSD(target, draft_model, listener, Budget(fixed=fixed))
