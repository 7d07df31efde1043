"""Progress on stderr: a rich live pipeline view on a terminal, sparse plain lines elsewhere."""

from __future__ import annotations

import sys
import time

from as2d.runtime.events import Event, LanguageDetected, Note, WindowDone


class PlainView:
    """Progress as plain ``as2d: …`` lines on stderr, for logs and pipes (``quiet``: none)."""

    PROGRESS_EVERY = 2.0  # seconds between progress lines of a long file

    def __init__(self, stream=sys.stderr, quiet: bool = False) -> None:
        self.stream = stream
        self.quiet = quiet
        self._last = 0.0

    def note(self, message: str) -> None:
        if not self.quiet:
            print(f"as2d: {message}", file=self.stream, flush=True)

    def window_progress(self, event: WindowDone, duration: float, label: str) -> None:
        """``label: done/total s (pct%)`` after a window of a file longer than one window, at
        most every ``PROGRESS_EVERY`` seconds (a log wants signs of life, not every window)."""
        now = time.monotonic()
        if duration <= 30 or now - self._last <= self.PROGRESS_EVERY:
            return
        self._last = now
        done = min(event.stats.end, duration)
        self.note(f"{label}: {done:.0f}/{duration:.0f} s ({100 * done / duration:.0f}%)")


class PlainReporter(PlainView):
    """One line per finished window on stderr; transcript text to stdout."""

    def __init__(self, stream=sys.stderr, quiet: bool = False) -> None:
        super().__init__(stream, quiet)
        self.source = ""
        self.duration = 0.0

    def start_file(self, source: str, duration: float) -> None:
        self.source, self.duration = source, duration

    def end_file(self) -> None:
        pass

    def print_text(self, text: str) -> None:
        print(text, flush=True)

    def __call__(self, event: Event) -> None:
        if self.quiet:
            return
        if isinstance(event, (Note, LanguageDetected)) and event.level != "debug":
            self.note(event.message)
        elif isinstance(event, WindowDone):
            self.window_progress(event, self.duration, self.source)


def want_live(live: bool | None, quiet: bool, stream=sys.stderr) -> bool:
    """Whether to show a rich live view on ``stream``: never when quiet, else as ``--live`` /
    ``--no-live`` says, and by default when ``stream`` is a terminal."""
    if quiet:
        return False
    return stream.isatty() if live is None else bool(live)


def make_reporter(live: bool | None, quiet: bool, stream=sys.stderr):
    if want_live(live, quiet, stream):
        try:
            from as2d.cli.display import LiveReporter
        except ImportError:  # pragma: no cover
            return PlainReporter(stream, quiet)
        return LiveReporter(stream)
    return PlainReporter(stream, quiet)
