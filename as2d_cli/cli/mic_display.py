"""What ``as2d mic`` shows: a rich live view on a terminal, plain lines elsewhere, and stats.

The live view follows the current utterance through the pipeline: the voice detector's level,
the drafter's words, the target's verdicts on them, and the utterance's text, committed (bold)
then still open (grey). Finished utterances print above the view, as a transcript scrolls. The
footer carries what a dictation user cares about: latency from the end of speech to committed
text (last, median, p90) and decoding speed.

Events only update a small state under a lock (on the engine's threads); rich renders it on
its own thread a few times a second, so decoding never waits for the terminal.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import deque

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from as2d.cli.display import LiveView, tail
from as2d.cli.progress import PlainView, want_live
from as2d.runtime.events import Drafted, Note, Verified, WindowDone
from as2d.runtime.live.live_events import (
    Committed,
    DecodeStarted,
    Hypothesis,
    ListenStarted,
    UtteranceDone,
    UtteranceEnded,
    UtteranceStarted,
    VoiceLevel,
)

_BARS = " ▁▂▃▄▅▆▇█"


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), without numpy."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _latencies(u: UtteranceDone) -> tuple[float, ...]:
    if u.latencies:
        return u.latencies
    return (u.latency,) if u.latency is not None else ()


class MicStats:
    """Per-utterance latency and pooled decoding figures, built from events only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.utterances: list[UtteranceDone] = []
        self.tokens = 0  # target tokens of every decode (partials included)
        self.decode_seconds = 0.0  # target decoding time of every decode
        self.encode_seconds = 0.0
        self.offered = self.accepted = self.passes = 0
        self.decodes = self.partials = self.speculative = self.reused = 0
        # Wall time of each decode of a whole utterance (speculative or final): the part of
        # the latency that the decoder choice (as2d vs target) can change.
        self.settle_seconds: list[float] = []
        self._settling = False

    def __call__(self, event) -> None:
        with self._lock:
            if isinstance(event, WindowDone):
                w = event.stats
                self.tokens += w.tokens
                self.decode_seconds += w.decode_seconds
                self.encode_seconds += w.encode_seconds
                self.offered += w.offered
                self.accepted += w.accepted
                self.passes += w.passes
            elif isinstance(event, DecodeStarted):
                self._settling = event.final or event.speculative
                self.decodes += 1
                self.partials += not event.final and not event.speculative
                self.speculative += event.speculative
            elif isinstance(event, Hypothesis) and self._settling and not event.reused:
                self._settling = False
                self.settle_seconds.append(event.decode_seconds)
            if isinstance(event, Hypothesis) and event.final:
                self.reused += event.reused
            elif isinstance(event, UtteranceDone):
                self.utterances.append(event)

    @property
    def latencies(self) -> list[float]:
        """One per endpointed utterance (utterances decoded together count each)."""
        return [x for u in self.utterances for x in _latencies(u)]

    def summary(self) -> dict:
        lat = self.latencies
        return {
            "utterances": len(self.utterances),
            "latency_median": round(statistics.median(lat), 3) if lat else None,
            "latency_p90": round(percentile(lat, 90), 3) if lat else None,
            "latency_max": round(max(lat), 3) if lat else None,
            "decodes": self.decodes,
            "partial_decodes": self.partials,
            "speculative_decodes": self.speculative,
            "finals_reused": self.reused,
            "tokens": self.tokens,
            "decode_seconds": round(self.decode_seconds, 3),
            "encode_seconds": round(self.encode_seconds, 3),
            "whole_utterance_decode_median": round(statistics.median(self.settle_seconds), 3)
            if self.settle_seconds else None,
            "tokens_per_second": round(self.tokens / self.decode_seconds, 1)
            if self.decode_seconds else 0.0,
            "acceptance": round(self.accepted / self.offered, 3) if self.offered else None,
            "tokens_per_pass": round(self.tokens / self.passes, 3) if self.passes else None,
        }


def print_mic_stats(stats: MicStats, stream) -> None:
    """The ``--stats`` report: one row per utterance, then latency and speed in one line each."""
    console = Console(file=stream, soft_wrap=True, highlight=False)
    t = Table(show_edge=False, pad_edge=False, title="utterances", title_justify="left")
    for col in ("#", "audio s", "reason", "decodes", "tokens", "latency s", "text"):
        t.add_column(col, justify="left" if col in ("reason", "text") else "right")
    for u in stats.utterances:
        ident = str(u.utterance) if u.merged == 1 else f"{u.utterance}-{u.utterance + u.merged - 1}"
        lat = " ".join(f"{x:.2f}" for x in _latencies(u)) or "-"
        t.add_row(ident, f"{u.start:.1f}-{u.end:.1f}", u.reason, str(u.decodes),
                  str(u.tokens), lat, tail(u.text, 48))
    console.print(t)
    s = stats.summary()
    if s["latency_median"] is not None:
        console.print(f"latency (end of speech → committed): median {s['latency_median']:.2f} s"
                      f", p90 {s['latency_p90']:.2f} s, max {s['latency_max']:.2f} s over "
                      f"{len(stats.latencies)} utterances")
    acc = f", acceptance {s['acceptance']:.2f}" if s["acceptance"] is not None else ""
    console.print(f"decoding: {s['decodes']} decodes ({s['partial_decodes']} of growing "
                  f"utterances, {s['speculative_decodes']} speculative finals of which "
                  f"{s['finals_reused']} were kept), "
                  f"{s['tokens']} tokens in {s['decode_seconds']:.2f} s = "
                  f"{s['tokens_per_second']:.1f} tokens/s{acc}; encoder "
                  f"{s['encode_seconds']:.2f} s")


class CommitWriter:
    """Appends committed words to the output file and stdout as they are committed.

    Each utterance is one line. The file is flushed after every commit, so whatever happens
    next (Ctrl-C, a lost device, a crash) everything committed is on disk. On a terminal
    with the live view, stdout gets whole lines (they print above the view); elsewhere words
    go out as they come.
    """

    def __init__(self, path=None, stdout=True, whole_lines: bool = False) -> None:
        self.path = path
        self.file = None
        self.stdout = stdout
        self.whole_lines = whole_lines
        self.error: str | None = None
        self._line: list[str] = []
        self._open_utt: int | None = None
        self._lock = threading.Lock()
        if path is not None:
            self.file = open(path, "a", encoding="utf-8")
            # Appending to an earlier dictation: start on a line of our own.
            if self.file.tell() > 0:
                with open(path, "rb") as f:
                    f.seek(-1, 2)
                    if f.read(1) != b"\n":
                        self.file.write("\n")
                        self.file.flush()

    def __call__(self, event) -> None:
        if isinstance(event, Committed):
            with self._lock:
                piece = event.text if event.first else " " + event.text
                self._open_utt = event.utterance
                self._line.append(piece)
                self._write_file(piece)
                if self.stdout and not self.whole_lines:
                    sys.stdout.write(piece)
                    sys.stdout.flush()
        elif isinstance(event, UtteranceDone):
            with self._lock:
                if self._open_utt != event.utterance:
                    return  # nothing of it was committed (no speech in it)
                self._end_line()

    def _end_line(self) -> None:
        """Close the open utterance's line in the file and on stdout (lock held)."""
        self._open_utt = None
        self._write_file("\n")
        if self.stdout:
            if self.whole_lines:
                print("".join(self._line), flush=True)
            else:
                sys.stdout.write("\n")
                sys.stdout.flush()
        self._line = []

    def _write_file(self, text: str) -> None:
        if self.file is None or self.error:
            return
        try:
            self.file.write(text)
            self.file.flush()
        except OSError as exc:
            self.error = f"cannot write to {self.path} ({exc.strerror or exc})"

    def close(self) -> None:
        with self._lock:
            if self._open_utt is not None:  # an utterance cut off (aborted): end its line
                self._end_line()
            if self.file is not None:
                try:
                    self.file.close()
                except OSError as exc:
                    self.error = self.error or f"cannot write to {self.path} ({exc})"
                self.file = None


class PlainMicReporter(PlainView):
    """One line per utterance on stderr (for logs and pipes); notes as they come."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def __call__(self, event) -> None:
        if self.quiet:
            return
        if isinstance(event, ListenStarted):
            who = event.decoder + " " + event.target + (f" ← {event.drafter}" if event.drafter
                                                        else "")
            pace = "" if event.speed is None else (
                f" at {event.speed:g}× real time" if event.speed else " unpaced")
            self.note(f"listening to {event.source}{pace} ({event.vad} VAD, {who}); "
                      "Ctrl-C to stop")
        elif isinstance(event, UtteranceDone):
            lat = f"latency {event.latency:.2f} s" if event.latency is not None else "no text"
            rate = (f", {event.tokens / event.target_decode_seconds:.0f} tok/s"
                    if event.target_decode_seconds else "")
            self.note(f"[{event.utterance}] {event.start:.1f}-{event.end:.1f} s "
                      f"({event.reason}): {lat}, {event.decodes} decodes{rate}")
        elif isinstance(event, Note) and event.level != "debug":
            self.note(event.message)


class MicView(LiveView):
    """The rich live view of ``as2d mic`` (on stderr)."""

    def __init__(self, stream=sys.stderr, refresh_per_second: float = 8.0,
                 echo_lines: bool = False) -> None:
        super().__init__(stream, refresh_per_second)
        self.echo_lines = echo_lines  # print finished utterances above the view ourselves
        self.started = time.perf_counter()
        self.source = self.vad = self.decoder = self.target = ""
        self.drafter: str | None = None
        self.speed: float | None = None
        self.position = 0.0
        self.prob = 0.0
        self.level_db = -120.0
        self.speaking = False
        self.levels: deque = deque(maxlen=24)
        self.open_utt: int | None = None  # the utterance being spoken (endpointer)
        self.open_start = 0.0
        self.utt: int | None = None  # the utterance shown (being decoded, or being spoken)
        self.utt_start = 0.0
        self.utt_end: float | None = None
        self.committed = ""
        self.tentative = ""
        self.decoding: str | None = None  # "partial" or "final" while a decode runs
        self.decode_span = (0.0, 0.0)
        self.drafted = ""
        self.verdicts: deque = deque(maxlen=40)  # target passes of the current decode
        self.recent: deque = deque(maxlen=60)  # (tokens, seconds) of recent target passes
        self.offered = self.accepted = 0
        self.latencies: list[float] = []
        self.last_latency: float | None = None
        self.done_utts = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._show(redirect_stdout=sys.stdout.isatty())

    def stop(self) -> None:
        self._hide()

    # -- events -----------------------------------------------------------------------------------
    def __call__(self, event) -> None:
        echo = None
        with self._lock:
            if isinstance(event, VoiceLevel):
                self.position, self.prob = event.at, event.probability
                self.level_db, self.speaking = event.level_db, event.speaking
                self.levels.append(event.probability)
            elif isinstance(event, ListenStarted):
                self.source, self.vad = event.source, event.vad
                self.decoder, self.target, self.drafter = (event.decoder, event.target,
                                                           event.drafter)
                self.speed = event.speed
            elif isinstance(event, UtteranceStarted):
                self.open_utt, self.open_start = event.utterance, event.start
                if self.decoding is None and (self.utt is None or self.utt_end is not None):
                    self._new_utt(event.utterance, event.start)
            elif isinstance(event, UtteranceEnded):
                if event.utterance == self.open_utt:
                    self.open_utt = None
                if event.utterance == self.utt:
                    self.utt_end = event.end
            elif isinstance(event, DecodeStarted):
                if event.utterance != self.utt:
                    self._new_utt(event.utterance, event.start)
                self.decoding = ("final" if event.final else
                                 "speculative" if event.speculative else "partial")
                self.decode_span = (event.start, event.end)
                self.drafted = ""
                self.verdicts.clear()
            elif isinstance(event, Drafted):
                if event.text:
                    self.drafted = (self.drafted + event.text)[-400:]
            elif isinstance(event, Verified):
                self.recent.append((len(event.committed), event.seconds))
                self.offered += event.offered
                self.accepted += event.accepted
                if event.offered or event.accepted_text or event.corrected_text:
                    self.verdicts.append((event.accepted_text, event.corrected_text,
                                          event.rejected_text, event.offered))
            elif isinstance(event, Hypothesis):
                if event.utterance == self.utt:
                    self.committed, self.tentative = event.committed, event.tentative
                self.decoding = None
            elif isinstance(event, UtteranceDone):
                self.done_utts += 1
                if event.latency is not None:
                    self.latencies.extend(_latencies(event))
                    self.last_latency = event.latency
                if event.utterance == self.utt:
                    self.committed, self.tentative = event.text, ""
                    if self.open_utt is not None and self.open_utt != self.utt:
                        self._new_utt(self.open_utt, self.open_start)
                if self.echo_lines and event.text:
                    echo = event.text
            elif isinstance(event, Note) and event.level != "debug":
                self.notes.append(event.message)
        if echo is not None and self._live is not None:
            self._live.console.print(echo)

    def _new_utt(self, utt: int, start: float) -> None:
        self.utt, self.utt_start, self.utt_end = utt, start, None
        self.committed = self.tentative = ""
        self.verdicts.clear()
        self.drafted = ""

    # -- rendering --------------------------------------------------------------------------------
    def __rich__(self):
        with self._lock:
            return self._render()

    def _render(self):
        width = max(40, self.console.width - 16)
        name = self.source.rsplit("/", 1)[-1]
        pace = "" if self.speed in (None, 1.0) else (f" ×{self.speed:g}" if self.speed
                                                    else " unpaced")
        title = Text.assemble(("● " if self.speaking else "○ ",
                               "bold red" if self.speaking else "dim"),
                              (name, "bold"), (pace, "dim"), "  ",
                              (self.decoder, "magenta"), f" {self.target}",
                              (f" ← {self.drafter}" if self.drafter else "", "cyan"),
                              (f"  {self.vad} VAD", "dim"))
        meter = "".join(_BARS[min(8, int(p * 8.999))] for p in self.levels).rjust(24)
        title.append(f"   {self.position:6.1f} s  ", style="dim")
        title.append(meter, style="red" if self.speaking else "dim")
        title.append(f" {self.level_db:4.0f} dB", style="dim")
        head = title

        rows = Table.grid(padding=(0, 1), expand=True)
        rows.add_column(style="bold", width=7, no_wrap=True)
        rows.add_column(ratio=1)
        if self.utt is not None:
            end = f"{self.utt_end:.1f}" if self.utt_end is not None else "…"
            state = {"partial": "decoding the growing utterance",
                     "speculative": "pause: decoding the whole utterance (speculative final)",
                     "final": "final decode"}.get(self.decoding or "",
                                                  "ended" if self.utt_end is not None
                                                  else "listening")
            if self.decoding:
                state += f" ({self.decode_span[1] - self.decode_span[0]:.1f} s of audio)"
            rows.add_row(Text(f"#{self.utt}", style="bold"),
                         Text(f"{self.utt_start:.1f}-{end} s  {state}", style="dim"))
            if self.drafter:
                rows.add_row(Text("draft", style="cyan"),
                             Text(tail(self.drafted, width), style="cyan dim"))
            # One line of target passes, newest last: drafted words it accepted (green), its
            # own token (yellow where it overruled the drafter, white where it went alone),
            # drafted words it rejected (red, struck through); passes separated by "·".
            passes: list[Text] = []
            used = 0
            for accepted, corrected, rejected, offered in reversed(self.verdicts):
                piece = Text()
                piece.append(accepted.strip(), style="green")
                if corrected.strip():
                    piece.append((" " if accepted.strip() else "") + corrected.strip(),
                                 style="bold yellow" if offered else "white")
                if rejected.strip():
                    piece.append(" ✗" + rejected.strip(), style="red strike")
                used += len(piece.plain) + 3
                if used > width and passes:
                    break
                passes.append(piece)
            line = Text(" · ", style="dim").join(reversed(passes))
            rows.add_row(Text("verify", style="green"), line)
            text = Text()
            committed = tail(self.committed, width)
            text.append(committed, style="bold white")
            if self.tentative:
                room = max(10, width - len(committed))
                text.append((" " if committed else "") + tail(self.tentative, room),
                            style="grey50 italic")
            rows.add_row(Text("text", style="white"), text)
        else:
            rows.add_row(Text("", style="dim"), Text("waiting for speech…", style="dim"))
        for n in self.notes:
            rows.add_row(Text("note", style="dim"), Text(n, style="dim"))

        tok = sum(n for n, _ in self.recent)
        sec = sum(s for _, s in self.recent)
        rate = f"{tok / sec:.0f} tok/s" if sec else "- tok/s"
        acc = f"accept {100 * self.accepted / self.offered:.0f}%" if self.offered else ""
        if self.latencies:
            lat = (f"latency last {self.last_latency:.2f} s · median "
                   f"{statistics.median(self.latencies):.2f} s · p90 "
                   f"{percentile(self.latencies, 90):.2f} s")
        else:
            lat = "latency -"
        foot = Text(f"{lat}   {rate}  {acc}   {self.done_utts} utterances   "
                    f"{time.perf_counter() - self.started:.0f} s", style="dim")
        return Panel(Group(head, rows, foot), border_style="dim", padding=(0, 1),
                     title="as2d mic", title_align="left")


def make_mic_reporter(live: bool | None, quiet: bool, stream=sys.stderr):
    """The live view when stderr is a terminal (or ``--live``), plain lines otherwise."""
    if want_live(live, quiet, stream):
        return MicView(stream, echo_lines=not sys.stdout.isatty())
    return PlainMicReporter(stream, quiet)
