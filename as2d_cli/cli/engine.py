"""Wiring of a decode: thread plan, target, drafter and strategy (the CLI's only engine glue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadPlan:
    total: int
    target: int  # target encoder and decoder
    drafter: int
    busy: int | None = None  # target decoder threads while the drafter still works

    def as_dict(self) -> dict:
        return {"total": self.total, "target": self.target, "drafter": self.drafter,
                "target_while_drafting": self.busy or self.target}


def plan_threads(total: int, decoder: str, drafter_threads: int = 0) -> ThreadPlan:
    """Threads per session. The target always gets every core for its encoder and decoder
    (as target-only does, so the comparison is honest); the drafter gets one thread unless
    told otherwise."""
    total = max(1, total)
    if decoder == "target":
        return ThreadPlan(total, total, 0)
    if decoder == "sd":  # serial: each model has every core while it runs
        return ThreadPlan(total, total, drafter_threads or total)
    drafter = max(1, drafter_threads or 1)
    return ThreadPlan(total, total, drafter, max(1, total - drafter))


def build_strategy(decoder: str, target, drafter: str, budget: str, plan: ThreadPlan,
                   models_dir, listener, note, load_drafter=None):
    """The decoding strategy for ``decoder``. ``load_drafter(spec, threads)`` loads the drafter
    (default: from the model cache); ``budget`` is ``auto`` or a number of candidates."""
    from as2d.runtime.speculative.budget import Budget
    from as2d.runtime.transcribe.decoders import TargetOnly

    from as2d.cli.resolve import load_whisper

    if decoder == "target":
        return TargetOnly(target, listener)
    check = getattr(target, "check_exact_rows", None)
    if check is not None and not check():
        # Verifying k tokens in one pass must give what k single passes give; this graph
        # (not written by as2d) rounds differently, so speculation could change the text.
        note(f"{target.name}: this model's graph does not compute rows independently, so "
             f"speculative decoding could change its output; decoding with the target alone")
        return TargetOnly(target, listener)
    if load_drafter is None:
        def load_drafter(spec: str, threads: int):
            return load_whisper(spec, None, models_dir, threads, progress=note, role="drafter")
    draft_model = load_drafter(drafter, plan.drafter)
    fixed = None if budget == "auto" else int(budget)
    if decoder == "as2d":
        from as2d.runtime.transcribe.as2d import AS2D

        return AS2D(target, draft_model, listener, Budget(fixed=fixed), busy_threads=plan.busy)
    from as2d.runtime.transcribe.sd import SerialSD

    return SerialSD(target, draft_model, listener, Budget(fixed=fixed))


def check_decoder_options(decoder: str, budget: str = "auto", threads: int = 0,
                          drafter_threads: int = 0, language: str | None = None) -> None:
    """The options every decoding command shares, checked before anything slow happens."""
    from as2d.cli.resolve import UserError

    if decoder not in ("as2d", "sd", "target"):
        raise UserError(f"--decoder must be as2d, sd or target, not {decoder!r}", 2)
    if budget != "auto":
        try:
            if int(budget) < 1:
                raise ValueError
        except ValueError:
            raise UserError(f"--budget must be a positive number or auto, not {budget!r}",
                            2) from None
    if threads < 0 or drafter_threads < 0:
        raise UserError("--threads and --drafter-threads cannot be negative", 2)
    if language is not None:
        from as2d.runtime.whisper.tokenizer import normalize_language

        try:
            normalize_language(language)
        except ValueError as exc:
            raise UserError(str(exc), 2) from None


def collect_segments(transcriber, audio, options, info, reporter, on_segment=None,
                     interrupt_note: str = "interrupted: finishing the current pass and "
                                           "keeping what was transcribed"):
    """Run a transcription to the end; a first Ctrl-C stops it after the current pass and
    keeps every segment decoded so far (a second one quits). Returns (segments, interrupted).
    """
    from as2d.cli.resolve import UserError

    segments: list = []
    interrupted = False
    gen = transcriber.transcribe(audio, options, info)
    try:
        while True:
            try:
                seg = next(gen)
            except StopIteration:
                break
            except KeyboardInterrupt:
                if interrupted:
                    raise
                interrupted = True
                transcriber.stop()
                reporter.note(interrupt_note)
                continue
            segments.append(seg)
            if on_segment is not None:
                on_segment(seg)
    except ValueError as exc:  # options the model cannot honour (e.g. a language)
        raise UserError(str(exc)) from None
    finally:
        gen.close()
    return segments, interrupted or info.interrupted
