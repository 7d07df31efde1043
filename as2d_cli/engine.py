"""Wiring of a decode: thread plan, target, drafter and strategy (the CLI's only engine glue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    total: int
    target: int
    drafter: int

    def as_dict(self) -> dict:
        return {"total": self.total, "target": self.target, "drafter": self.drafter}


def plan_threads(total: int, decoder: str, drafter_threads: int = 0) -> ThreadPlan:
    """Threads per session. The target always gets every core for its encoder and decoder
    (as target-only does, so the comparison is honest); the drafter gets one thread unless
    told otherwise."""
    total = max(1, total)
    if decoder == "target":
        return ThreadPlan(total, total, 0)
    return ThreadPlan(total, total, max(1, drafter_threads or 1))


def build_strategy(decoder: str, target, drafter: str, precision: str | None, budget: str,
                   plan: ThreadPlan, models_dir, listener, note):
    from runtime.budget import Budget
    from runtime.strategies import TargetOnly

    from .resolve import load_whisper

    if decoder == "target":
        return TargetOnly(target, listener)
    draft_model = load_whisper(drafter, None, models_dir, plan.drafter, progress=note)
    fixed = None if budget == "auto" else int(budget)
    if decoder == "as2d":
        from runtime.as2d import AS2D

        return AS2D(target, draft_model, listener, Budget(fixed=fixed))
    from runtime.sd import SerialSD

    return SerialSD(target, draft_model, listener, Budget(fixed=fixed))
