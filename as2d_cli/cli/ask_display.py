"""What ``as2d ask`` shows on stderr: both stages (transcribe, then answer) as they happen.

On a terminal a rich live panel shows the transcription (progress, the drafter's stream, the
committed transcript, throughput and acceptance) and then the answer growing, each piece
coloured by where it came from: a candidate accepted from the transcript, the drafter's stream,
the question or the prompt's examples, or the answering model's own token. Elsewhere a few
plain lines. Like the transcribe display, the engine's events only update a small state under a
lock; rich renders it on its own thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

from as2d.cli.display import LiveView, tail
from as2d.cli.progress import PlainView, want_live
from as2d.runtime.ask.answer_events import AnswerStep, AskStarted, Prefilled
from as2d.runtime.events import (
    Drafted,
    LanguageDetected,
    Note,
    RunDone,
    RunStarted,
    SegmentDone,
    Verified,
    WindowDone,
)

SOURCE_STYLE = {"transcript": "green", "drafter": "cyan", "question": "magenta",
                "examples": "blue"}


class AskState:
    """Both stages' figures, updated from events (any thread) under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.source, self.duration, self.question = "", 0.0, ""
        self.decoder, self.target, self.drafter, self.llm = "", "", None, ""
        self.stage = 1
        self.position = 0.0
        self.drafted = ""
        self.committed = ""
        self.window_text = ""
        self.tokens = self.offered = self.accepted = self.passes = 0
        self.decode_seconds = 0.0
        self.transcribe_started = time.perf_counter()
        self.transcribe_seconds = 0.0
        self.notes: deque = deque(maxlen=2)
        # stage 2
        self.prompt_tokens = 0
        self.candidates = True
        self.prefill_seconds = 0.0
        self.answer: list[tuple[str, str | None]] = []  # (text, source or None = own token)
        self.answer_tokens = 0
        self.gen_seconds = 0.0
        self.gen_tokens = 0
        self.by_source: dict[str, list[int]] = {}

    def __call__(self, event) -> None:
        with self.lock:
            if isinstance(event, RunStarted):
                self.decoder, self.target, self.drafter = (event.decoder, event.target,
                                                           event.drafter)
                self.transcribe_started = time.perf_counter()
            elif isinstance(event, Drafted):
                self.drafted = (self.drafted + event.text)[-600:]
            elif isinstance(event, Verified):
                self.passes += 1
                self.tokens += len(event.committed)
                self.offered += event.offered
                self.accepted += event.accepted
                self.decode_seconds += event.seconds
                self.window_text += event.accepted_text + event.corrected_text
            elif isinstance(event, SegmentDone):
                self.committed = (self.committed + event.segment.text)[-600:]
                self.position = max(self.position, event.segment.end)
            elif isinstance(event, WindowDone):
                self.position = max(self.position, min(event.stats.end, self.duration))
                self.window_text = ""
            elif isinstance(event, RunDone):
                if not event.interrupted:  # stopped: where the committed text reaches
                    self.position = self.duration
                self.transcribe_seconds = event.wall_seconds
            elif isinstance(event, AskStarted):
                self.stage = 2
                self.notes.clear()  # stage 1's notes (language detected, ...) are stale now
                # A new question (several in one run): its answer starts empty.
                self.answer, self.answer_tokens = [], 0
                self.gen_tokens, self.gen_seconds = 0, 0.0
                self.llm, self.question = event.llm, event.question
                self.prompt_tokens = event.prompt_tokens
                self.candidates = event.candidates
                self.by_source = {s: [0, 0] for s in event.sources}
            elif isinstance(event, Prefilled):
                self.prefill_seconds = event.seconds
                self.answer.append((event.first_text, None))
                self.answer_tokens += 1
            elif isinstance(event, AnswerStep):
                if event.accepted_text:
                    self.answer.append((event.accepted_text, event.source))
                self.answer.append((event.own_text, None))
                self.answer_tokens += len(event.committed)
                self.gen_tokens += len(event.committed)
                self.gen_seconds += event.seconds
                if event.source is not None:
                    acc = self.by_source.setdefault(event.source, [0, 0])
                    acc[0] += event.accepted
                    acc[1] += event.offered
            elif isinstance(event, (Note, LanguageDetected)) and event.level != "debug":
                self.notes.append(event.message)


class LiveAskReporter(LiveView):
    """The rich live panel of both stages (stderr)."""

    def __init__(self, stream=sys.stderr, refresh_per_second: float = 8.0) -> None:
        super().__init__(stream, refresh_per_second)
        self.state = AskState()

    def start(self, source: str, duration: float, question: str) -> None:
        st = self.state
        with st.lock:
            st.source, st.duration, st.question = source, duration, question
        self._show(redirect_stdout=False)

    def stop(self) -> None:
        self._hide()

    def _add_note(self, message: str) -> None:
        with self.state.lock:
            self.state.notes.append(message)

    def __call__(self, event) -> None:
        self.state(event)

    def __rich__(self):
        with self.state.lock:
            return self._render(self.state)

    @staticmethod
    def _render(st: AskState):
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        head = Text.assemble((st.source.rsplit("/", 1)[-1], "bold"), "  ",
                             (st.decoder, "magenta"), f" {st.target}",
                             (f" ← {st.drafter}" if st.drafter else "", "cyan"),
                             ("  →  " + st.llm if st.llm else "", "bold"))
        rows = Table.grid(padding=(0, 1), expand=True)
        rows.add_column(style="bold", width=9, no_wrap=True)
        rows.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        rate = st.tokens / st.decode_seconds if st.decode_seconds else 0.0
        acc = f"{100 * st.accepted / st.offered:.0f}%" if st.offered else "-"
        took = (st.transcribe_seconds if st.stage == 2 or st.transcribe_seconds
                else time.perf_counter() - st.transcribe_started)
        bar = Table.grid(expand=True, padding=(0, 1))
        bar.add_column(ratio=1)
        bar.add_column(no_wrap=True)
        bar.add_row(ProgressBar(total=max(st.duration, 1e-6), completed=st.position),
                    Text(f"{st.position:.0f}/{st.duration:.0f} s  {rate:.0f} tok/s  "
                         f"accept {acc}  {took:.1f} s", style="dim"))
        rows.add_row(Text("1 listen", style="cyan" if st.stage == 1 else "dim"), bar)
        if st.stage == 1:
            rows.add_row(Text("  draft", style="cyan"),
                         Text(tail(st.drafted, 160), style="cyan") if st.drafter else
                         Text("(no drafter: the target decodes alone)", style="dim"))
        heard = Text(tail(st.committed, 110), style="white" if st.stage == 1 else "dim")
        heard.append(tail(st.window_text, 60), style="bold white")
        rows.add_row(Text("  heard", style="white"), heard)
        rows.add_row(Text("2 answer", style="bold" if st.stage == 2 else "dim"),
                     Text(f"Q: {st.question}", style="bold" if st.stage == 2 else "dim"))
        if st.stage == 2:
            answer = Text("A:")
            for text, source in st.answer:
                # The line break that ends a one-line answer is a stop, not answer text.
                answer.append(text.replace("\n", " ").rstrip() if text.endswith("\n")
                              else text, style=SOURCE_STYLE.get(source, "white")
                              if source else "white")
            rows.add_row("", answer)
            gen_rate = st.gen_tokens / st.gen_seconds if st.gen_seconds else 0.0
            srcs = "  ".join(f"{name} {a}/{o}" for name, (a, o) in st.by_source.items() if o)
            info = Text(f"prompt {st.prompt_tokens} tok in {st.prefill_seconds:.2f} s  "
                        f"{st.answer_tokens} tok  {gen_rate:.0f} tok/s", style="dim")
            if not st.candidates:
                info.append("  (no candidates)", style="dim")
            elif srcs:
                info.append("  accepted " + srcs, style="dim")
            rows.add_row("", info)
        rows.add_row("", Text(st.notes[-1] if st.notes else "", style="yellow"))
        return Panel(Group(head, rows), border_style="dim", padding=(0, 1))


class PlainAskReporter(PlainView):
    """Sparse plain lines on stderr (not a terminal): notes, and one line per stage."""

    def __init__(self, stream=sys.stderr, quiet: bool = False) -> None:
        super().__init__(stream, quiet)
        self.state = AskState()

    def start(self, source: str, duration: float, question: str) -> None:
        with self.state.lock:
            self.state.source, self.state.duration = source, duration
            self.state.question = question

    def stop(self) -> None:
        pass

    def __call__(self, event) -> None:
        self.state(event)
        if self.quiet:
            return
        st = self.state
        if isinstance(event, (Note, LanguageDetected)) and event.level != "debug":
            self.note(event.message)
        elif isinstance(event, WindowDone):
            self.window_progress(event, st.duration, "transcribing")
        elif isinstance(event, RunDone):
            self.note(transcribed_note(st, event))
        elif isinstance(event, AskStarted):
            how = "with candidates from " + ", ".join(event.sources) if event.candidates \
                else "without candidates"
            self.note(f"answering with {event.llm} ({event.prompt_tokens}-token prompt, {how})")


def transcribed_note(st: AskState, event: RunDone) -> str:
    """What the transcription covered: the whole recording, or (stopped by a signal) the
    seconds its committed text reaches."""
    if event.interrupted:
        return (f"transcribed {st.position:.1f} s of {st.duration:.1f} s of audio in "
                f"{event.wall_seconds:.1f} s (stopped)")
    return f"transcribed {st.duration:.1f} s of audio in {event.wall_seconds:.1f} s"


def make_ask_reporter(live: bool | None, quiet: bool, stream=sys.stderr):
    if want_live(live, quiet, stream):
        return LiveAskReporter(stream)
    return PlainAskReporter(stream, quiet)


def print_answer_stats(stats, stream) -> None:
    """The answer stage of ``--stats``: prompt, generation rate, acceptance by source."""
    from rich.console import Console
    from rich.table import Table

    s = stats.to_dict()
    console = Console(file=stream, soft_wrap=True, highlight=False)
    console.print(f"[bold]answer[/]  llm={s['llm']}  candidates="
                  f"{'on' if s['candidates'] else 'off'}")
    console.print(f"  prompt: {s['prompt_tokens']} tokens (transcript {s['transcript_tokens']}"
                  f"{', passages selected' if s['transcript_selected'] else ''}) prefilled in "
                  f"{s['prefill_seconds']:.3f} s = {s['prefill_tokens_per_second']:.0f} tokens/s"
                  + (f" ({s['prefill_cached_tokens']} head tokens from the cache)"
                     if s['prefill_cached_tokens'] else ""))
    console.print(f"  generation: {s['answer_tokens']} tokens; after the prefill "
                  f"{s['generation_tokens']} tokens in {s['generation_seconds']:.3f} s = "
                  f"{s['tokens_per_second']:.1f} tokens/s, {s['passes']} passes "
                  f"({s['tokens_per_pass']:.2f} tokens/pass, {s['passes_alone']} alone); "
                  f"stopped: {s['stopped']}")
    if s["by_source"]:
        t = Table(show_edge=False, pad_edge=False)
        for col in ("source", "passes", "offered", "accepted", "accept%"):
            t.add_column(col, justify="right")
        for name, v in s["by_source"].items():
            t.add_row(name, str(v["passes"]), str(v["offered"]), str(v["accepted"]),
                      f"{100 * v['acceptance']:.0f}" if v["offered"] else "-")
        t.add_row("all", str(s["passes"] - s["passes_alone"]), str(s["candidates_offered"]),
                  str(s["candidates_accepted"]),
                  f"{100 * s['acceptance']:.0f}" if s["candidates_offered"] else "-")
        console.print(t)


EVIDENCE_CHARS = 240  # a passage longer than this is cut (the whole of it is in --json)


def render_answer(result, question: bool = False) -> str:
    """An answer as ``as2d ask`` prints it: the answer's line, then its evidence, best first,
    one passage a line (``[0:03–0:08] "…"``, ``[0:03–0:08] SPEAKER_01: "…"`` when speakers are
    known); ``question``: the question first (``Q: …``, when
    several are answered). Rendering only: the same :class:`~as2d.engine.AskResult` is the
    ``--json`` document."""
    from as2d.runtime.ask.spans import format_time

    lines = [f"Q: {result.question}"] if question else []
    lines.append(result.answer.text)
    for e in result.evidence:
        text = " ".join(e.text.split())
        if len(text) > EVIDENCE_CHARS:
            text = text[:EVIDENCE_CHARS - 1].rstrip() + "…"
        who = f"{e.speaker}: " if e.speaker is not None else ""  # (a diarized recording)
        lines.append(f"[{format_time(e.start)}–{format_time(e.end)}] {who}\"{text}\"")
    return "\n".join(lines) + "\n"
