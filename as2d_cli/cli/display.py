"""The live pipeline view: draft → verify → commit, rendered on stderr with rich.

The engine's events only update a small state under a lock (cheap, on the worker threads);
rich renders that state a few times a second on its own thread. Decoding never waits for the
terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from as2d.runtime.events import (
    Drafted,
    Event,
    LanguageDetected,
    Note,
    RunDone,
    RunStarted,
    SegmentDone,
    Verified,
    WindowDone,
    WindowStarted,
)

_KEEP = 720  # characters of the drafted and committed text kept for the view


def tail(text: str, n: int) -> str:
    """The last ``n`` characters of ``text`` on one line: a live view shows where text grows."""
    text = " ".join(text.split())
    return text if len(text) <= n else "…" + text[-(n - 1):]


class LiveView:
    """A rich Live region on stderr that rich's own thread redraws at a bounded rate.

    Event handlers (called on the engine's threads) only update the view's state under
    ``self._lock``; drawing happens elsewhere, so a live view cannot slow decoding down.
    """

    def __init__(self, stream, refresh_per_second: float) -> None:
        self.console = Console(file=stream, highlight=False)
        self.refresh = refresh_per_second
        self._lock = threading.Lock()
        self._live: Live | None = None
        self.notes: deque = deque(maxlen=2)

    def _show(self, redirect_stdout: bool) -> None:
        self._live = Live(self, console=self.console, refresh_per_second=self.refresh,
                          transient=True, redirect_stdout=redirect_stdout, redirect_stderr=False)
        self._live.start()

    def _hide(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def note(self, message: str) -> None:
        """A one-line message: inside the view while it is shown, else printed."""
        if self._live is None:
            self.console.print(f"as2d: {message}")
        else:
            self._add_note(message)

    def _add_note(self, message: str) -> None:
        with self._lock:
            self.notes.append(message)


class LiveReporter(LiveView):
    """A rich Live view on stderr; transcript lines print above it (or to a piped stdout)."""

    def __init__(self, stream=sys.stderr, refresh_per_second: float = 6.0) -> None:
        super().__init__(stream, refresh_per_second)
        self._reset("", 0.0)

    # -- state --------------------------------------------------------------------------------
    def _reset(self, source: str, duration: float) -> None:
        self.source, self.duration = source, duration
        self.decoder, self.target, self.drafter = "", "", None
        self.window, self.window_start, self.window_end = 0, 0.0, 0.0
        self.position = 0.0  # audio seconds fully transcribed
        self.drafted = ""  # the drafter's stream (text), capped
        self.draft_time = 0.0
        self.committed = ""  # final segments so far
        self.window_text = ""  # this window's committed text (not final until the window ends)
        self.verdicts: deque = deque(maxlen=5)
        self.passes = self.tokens = self.offered = self.accepted = self.alone = 0
        self.decode_seconds = 0.0
        self.recent: deque = deque(maxlen=40)  # (tokens, seconds) of recent passes
        self.started = time.perf_counter()
        self.notes: deque = deque(maxlen=2)

    # -- reporter interface (used by the commands) --------------------------------------------
    def start_file(self, source: str, duration: float) -> None:
        with self._lock:
            self._reset(source, duration)
        self._show(redirect_stdout=sys.stdout.isatty())

    def end_file(self) -> None:
        self._hide()

    def print_text(self, text: str) -> None:
        print(text, flush=True)

    # -- events (worker threads) ----------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, RunStarted):
                self.decoder, self.target, self.drafter = event.decoder, event.target, event.drafter
            elif isinstance(event, WindowStarted) and event.worker == "target":
                self.window, self.window_start, self.window_end = (event.window, event.start,
                                                                   event.end)
                self.window_text = ""
            elif isinstance(event, Drafted):
                if event.text:
                    self.drafted = (self.drafted + event.text)[-_KEEP:]
                self.draft_time = event.audio_time
            elif isinstance(event, Verified):
                self.passes += 1
                n = len(event.committed)
                self.tokens += n
                self.offered += event.offered
                self.accepted += event.accepted
                self.alone += event.offered == 0
                self.decode_seconds += event.seconds
                self.recent.append((n, event.seconds))
                self.window_text += event.accepted_text + event.corrected_text
                self.verdicts.append((event.accepted_text, event.corrected_text,
                                      event.rejected_text, event.offered))
            elif isinstance(event, SegmentDone):
                self.committed = (self.committed + event.segment.text)[-_KEEP:]
                self.position = max(self.position, event.segment.end)
            elif isinstance(event, WindowDone):
                self.position = max(self.position, min(event.stats.end, self.duration))
                self.window_text = ""
            elif isinstance(event, (Note, LanguageDetected)) and event.level != "debug":
                self.notes.append(event.message)
            elif isinstance(event, RunDone):
                self.position = self.duration

    # -- rendering (rich's refresh thread) ------------------------------------------------------
    def __rich__(self):
        with self._lock:
            return self._render()

    def _render(self):
        recent_tok = sum(n for n, _ in self.recent)
        recent_s = sum(s for _, s in self.recent)
        rate = recent_tok / recent_s if recent_s else 0.0
        acc = f"{100 * self.accepted / self.offered:.0f}%" if self.offered else "-"
        elapsed = time.perf_counter() - self.started
        head = Table.grid(expand=True, padding=(0, 1))
        head.add_column(ratio=3)
        head.add_column(ratio=2)
        title = Text.assemble((self.source.rsplit("/", 1)[-1], "bold"), "  ",
                              (f"{self.decoder}", "magenta"), f" {self.target}",
                              (f" ← {self.drafter}" if self.drafter else "", "cyan"))
        stats = Text(f"window {self.window}  {self.position:.0f}/{self.duration:.0f} s  "
                     f"{rate:.0f} tok/s  {self.tokens / max(self.passes, 1):.1f} tok/pass  "
                     f"accept {acc}  alone {self.alone}/{self.passes}  {elapsed:.1f} s")
        head.add_row(title, stats)
        # A table cell ends its line; a bare ProgressBar would run into the next renderable.
        bar = Table.grid(expand=True)
        bar.add_column()
        bar.add_row(ProgressBar(total=max(self.duration, 1e-6), completed=self.position))

        # A fixed number of rows: the live region never changes height (no flicker).
        rows = Table.grid(padding=(0, 1), expand=True)
        rows.add_column(style="bold", width=7, no_wrap=True)
        rows.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        if self.drafter:
            draft = Text(tail(self.drafted, 140), style="cyan") + Text(
                f"  @{self.draft_time:.1f}s", style="dim")
        else:
            draft = Text("(no drafter: the target decodes alone)", style="dim")
        rows.add_row(Text("draft", style="cyan"), draft)
        verdicts = list(self.verdicts)[-3:]
        verdicts = [None] * (3 - len(verdicts)) + verdicts
        for v in verdicts:
            line = Text()
            if v is not None:
                accepted, corrected, rejected, offered = v
                line.append(accepted, style="green")
                if corrected:
                    line.append(corrected, style="bold yellow" if offered else "white")
                if rejected:
                    line.append(" ✗" + rejected, style="red strike")
            rows.add_row(Text("verify", style="green"), line)
        committed = Text(tail(self.committed, 90), style="white")
        committed.append(tail(self.window_text, 60), style="bold white")
        rows.add_row(Text("commit", style="white"), committed)
        rows.add_row(Text("", style="dim"), Text(self.notes[-1] if self.notes else "",
                                                  style="dim"))
        return Panel(Group(head, bar, rows), border_style="dim", padding=(0, 1))
