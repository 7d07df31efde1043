"""Progress of ``as2d batch``: a rich table on a terminal, one plain line per file elsewhere.

Both show the same figures: files done and failed, hours of audio transcribed, throughput in
hours of audio per hour of wall time, an ETA from that throughput and the audio still to do,
and (on a terminal) what each worker is doing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class BatchDisplay:
    """Counts the run's events; :class:`PlainBatchDisplay` and :class:`RichBatchDisplay` show
    them."""

    def __init__(self, stream, jobs) -> None:
        self.stream = stream
        self.total = len(jobs)
        self.todo_audio = sum(j.weight for j in jobs)
        self.done = self.failed = 0
        self.audio = 0.0
        self.started = time.monotonic()
        self.workers: dict[str, str] = {}  # short name -> what it is doing
        self.idents: dict[str, str] = {}
        self.actors = 0

    def begin(self, actors: int) -> None:
        self.actors = actors
        self.started = time.monotonic()

    # -- figures --
    def rate(self) -> float:
        """Hours of audio per hour of wall time, so far."""
        wall = time.monotonic() - self.started
        return self.audio / wall if wall > 0 else 0.0

    def eta(self) -> str:
        rate = self.rate()
        left = max(0.0, self.todo_audio - self.audio)
        return _hms(left / rate) if rate > 0 else "?"

    def figures(self) -> str:
        return (f"{self.done + self.failed}/{self.total} files ({self.failed} failed), "
                f"{self.audio / 3600:.3f} h audio, {self.rate():.1f} h/h, ETA {self.eta()}")

    def event(self, e) -> None:
        if e.kind == "worker":
            self.idents[e.worker] = e.text
            self.workers[e.worker] = "ready"
        elif e.kind == "start":
            self.workers[e.worker] = Path(e.job.path).name
        elif e.kind == "end":
            self.workers[e.worker] = "idle"
            if e.row["status"] == "done":
                self.done += 1
                self.audio += e.row.get("duration") or 0.0
            else:
                self.failed += 1
            self.todo_audio -= 0 if e.row["status"] == "done" else e.job.weight
        elif e.kind == "lost":
            self.workers.pop(e.worker, None)
        self.show(e)

    def show(self, e) -> None:  # pragma: no cover - overridden
        pass

    def summary(self, result, manifest: Path) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class PlainBatchDisplay(BatchDisplay):
    """``as2d: [3/50] done a.wav (12.1 s in 2.3 s, w1) — ...`` lines, for logs and pipes."""

    def __init__(self, stream, jobs, quiet: bool = False) -> None:
        super().__init__(stream, jobs)
        self.quiet = quiet

    def line(self, text: str, always: bool = False) -> None:
        if self.quiet and not always:
            return
        try:
            print(f"as2d: {text}", file=self.stream, flush=True)
        except (OSError, ValueError):
            pass

    def begin(self, actors: int) -> None:
        super().begin(actors)
        self.line(f"batch: {self.total} files, {self.todo_audio / 3600:.3f} h of audio, "
                  f"{actors} actor(s)")

    def show(self, e) -> None:
        n = self.done + self.failed
        if e.kind == "worker":
            self.line(f"worker {e.worker} ready ({e.text})")
        elif e.kind == "end" and e.row["status"] == "done":
            self.line(f"[{n}/{self.total}] done {e.job.source} ({e.row['duration']:.1f} s "
                      f"in {e.row['wall']:.1f} s, {e.worker}) — {self.figures()}")
        elif e.kind == "end":
            self.line(f"error: {e.job.source}: {e.row.get('error')}", always=True)
        elif e.kind == "lost":
            self.line(f"warning: worker {e.worker} died on {e.job.source} ({e.text}); "
                      "the file is tried again on another worker", always=True)
        elif e.kind == "stopping":
            self.line(f"interrupted: finishing the {e.text} (Ctrl-C again to drop them)",
                      always=True)

    def summary(self, result, manifest: Path) -> None:
        self.line(f"batch: {result.done} done, {result.failed} failed, {result.skipped} "
                  f"already done, {result.audio_seconds / 3600:.3f} h audio in "
                  f"{_hms(result.wall)}; manifest: {manifest}")


class RichBatchDisplay(PlainBatchDisplay):
    """A live table: the figures, then one row per worker."""

    def __init__(self, stream, jobs) -> None:
        super().__init__(stream, jobs)
        from rich.console import Console

        self.console = Console(file=stream)
        self._live = None

    def render(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=True, pad_edge=False)
        table.add_column("worker")
        table.add_column("file")
        for name, doing in sorted(self.workers.items()):
            table.add_row(name, doing)
        return Group(Text(self.figures(), style="bold"), table)

    def __enter__(self):
        from rich.live import Live

        self._live = Live(self.render(), console=self.console, refresh_per_second=4,
                          transient=False)
        self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(None, None, None)
            self._live = None
            if not self.console.is_terminal:  # (forced --live) the table has no last newline
                self.console.line()

    def line(self, text: str, always: bool = False) -> None:
        self.console.print(f"as2d: {text}", highlight=False, markup=False)

    def show(self, e) -> None:
        if e.kind in ("lost", "stopping") or (e.kind == "end" and e.row["status"] != "done"):
            super().show(e)
        if self._live is not None:
            self._live.update(self.render())


def make_display(live: bool | None, quiet: bool, stream=sys.stderr, jobs=()) -> BatchDisplay:
    if live is None:
        live = not quiet and stream.isatty()
    if live:
        return RichBatchDisplay(stream, jobs)
    return PlainBatchDisplay(stream, jobs, quiet)
