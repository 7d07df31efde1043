"""AS²D: the target verifies whatever the concurrently running drafter has ready.

The drafter (:mod:`.drafter`) transcribes the whole file on its own thread into a
:class:`~as2d.runtime.speculative.stream.CandidateStream`. Before each target pass the window's
:class:`AlignedSource` asks the :class:`~as2d.runtime.speculative.align.Aligner` where the
target's text stands in that stream and the budget how many following tokens to verify; none
ready → a plain step. Neither side waits for the other, not at a file boundary either: told
what comes next (:meth:`AS2D.prefetch`), the drafter goes on to the next file at once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from as2d.runtime.events import Listener, Note
from as2d.runtime.speculative.align import SEGMENT, SENTENCE, Aligner, TokenKeys
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.speculative.candidates import NO_CANDIDATES, CandidateSource
from as2d.runtime.speculative.lookup import REPEAT_PRIOR
from as2d.runtime.speculative.stream import CandidateStream
from as2d.runtime.speculative.verify import Verdict
from as2d.runtime.transcribe.drafter import DrafterWorker
from as2d.runtime.transcribe.opening_times import OpeningTimes, closing_time
from as2d.runtime.transcribe.strategy import BudgetedSource, DraftingStrategy, Window
from as2d.runtime.transcribe.stream_source import window_repetition
from as2d.runtime.transcribe.turns import EncoderTurns
from as2d.runtime.whisper.features import LogMel
from as2d.runtime.whisper.model import WhisperModel
from as2d.runtime.whisper.seeking import kept_text_tokens


class AS2D(DraftingStrategy):
    """A run's drafter thread and candidate stream; one :class:`AlignedSource` per window."""

    name = "as2d"
    streams = True

    def __init__(self, target: WhisperModel, drafter: WhisperModel,
                 listener: Listener | None = None, budget: Budget | None = None) -> None:
        super().__init__(target, drafter, listener, budget)
        tk = target.tokenizer
        # Spellings the aligner equates (the byte table is built on first use).
        self.keys = TokenKeys(lambda: tk.token_bytes, tk.encode_piece)
        self.turns = EncoderTurns()
        self.times = OpeningTimes(tk.timestamp_begin)
        self.worker: DrafterWorker | None = None
        self.stream: CandidateStream | None = None
        self.aligner: Aligner | None = None
        self.blind_misses = 0  # consecutive rejected offers made while not synchronised
        self._drafting = False  # started for the current run (stream made, worker maybe)
        self._ahead: list[_Ahead] = []  # next files' drafts, in order, already running
        self._dropped: list[DrafterWorker] = []  # stopped drafts of skipped files, to join
        self._closed = False  # after close(), a late prefetch starts nothing
        self._lock = threading.Lock()  # prefetch() comes from another thread

    def start_early(self, mel: LogMel, language: str | None, options) -> None:
        # Without waiting for the target's language detection (an encoder run) where the
        # drafter does not need it: that lead is most of a short clip's speed-up.
        if language is None and self.drafter.multilingual and not self._multilingual(options):
            return  # it needs the language the target is about to detect
        if not self._adopt(mel, language):
            self._start_drafting(mel, language, options)

    def prefetch(self, mel: LogMel, language: str | None, options) -> None:
        """``mel`` is transcribed after the current run: draft it as soon as the drafter is done
        with the files before it (its events are held back until its run begins)."""
        if not self._multilingual(options):
            if language is None and self.drafter.multilingual:
                return  # it needs the language the target detects when it gets there
            if not self.drafter_understands(language):
                return
        with self._lock:
            if self._closed:  # a reader thread finished decoding after the run was closed
                return
            after = self._ahead[-1].worker if self._ahead else self.worker
            held = _HeldEvents(self.emit)
            stream = CandidateStream()
            worker = DrafterWorker(self.drafter, self.target.tokenizer, mel, stream,
                                   language, held, after=after,
                                   turns=self.turns).start()
            self._ahead.append(_Ahead(mel, language, stream, worker, held))

    def _adopt(self, mel: LogMel, language: str | None) -> bool:
        """Take over the draft prefetched for ``mel``, if it was made for this language."""
        ahead = self._drop_ahead(mel)
        if ahead is None or ahead.language != language:
            if ahead is not None:
                ahead.worker.stop()
                ahead.worker.join()
            return False
        self._drafting = True
        self.stream, self.worker = ahead.stream, ahead.worker
        self.aligner = Aligner(self.stream, keys=self.keys)
        ahead.held.release()  # what it drafted so far is this run's, from now on
        return True

    def _drop_ahead(self, mel: LogMel) -> _Ahead | None:
        """Remove the prefetched drafts up to ``mel``'s (stopping the skipped ones); return
        ``mel``'s, if there is one."""
        with self._lock:
            if not any(a.mel is mel for a in self._ahead):
                return None
            while self._ahead:
                ahead = self._ahead.pop(0)
                if ahead.mel is mel:
                    return ahead
                ahead.worker.stop()
                self._dropped.append(ahead.worker)

    def begin(self, mel: LogMel, language: str | None, options) -> None:
        super().begin(mel, language, options)
        self.times.audio(mel.samples)
        if self._multilingual(options):  # every window in its own language: the run's first
            language = None  # window's says nothing about the others
        if not self._drafting:
            ahead = self._drop_ahead(mel)  # a draft made ahead for other options (another
            if ahead is not None:  # language, or each window's): not this run's
                ahead.worker.stop()
                self._dropped.append(ahead.worker)
            self._start_drafting(mel, language, options)
        elif not self.drafter_understands(language):
            self._stop_drafting()  # it drafted English for audio the target calls otherwise
            self._start_drafting(mel, language, options)  # an empty, finished stream

    def _multilingual(self, options) -> bool:
        """A run that detects every window's language (on a multilingual target)."""
        return options.multilingual and self.target.multilingual

    def target_encoding(self, mel: LogMel, window: Window):
        return self.turns.target_encoding(mel, window.end)

    def drafted_tokens(self) -> list[int]:
        return list(self.stream.tokens) if self.stream is not None else []

    def source(self, window: Window) -> CandidateSource:
        if not self.drafter_understands(window.language):
            # A window in a language the drafter cannot draft: nothing to offer.
            self.aligner.synced = False
            return NO_CANDIDATES
        return AlignedSource(self, window)

    def end(self) -> None:
        self._stop_drafting()
        self._drafting = False  # the stream stays readable (as2d ask looks up candidates in it)
        self.times.audio(None)  # the file's samples (a long file's memmap) are not kept

    def close(self) -> None:
        super().close()
        with self._lock:
            self._closed = True
            ahead, self._ahead = self._ahead, []
            dropped, self._dropped = self._dropped, []
        # Every drafter thread ends here: one inside onnxruntime at exit aborts the process.
        workers = [a.worker for a in ahead] + dropped
        for w in workers:
            w.stop()
        for w in workers:
            w.join()

    def candidate_stream(self) -> CandidateStream | None:
        return self.stream

    def _start_drafting(self, mel: LogMel, language: str | None, options) -> None:
        self._drafting = True
        self.stream = CandidateStream()
        self.aligner = Aligner(self.stream, keys=self.keys)
        if not self.drafter_understands(language):
            self.stream.finish()
            self.emit(Note(f"drafter {self.drafter.name} is English-only and the audio is "
                           f"{language!r}: the target decodes alone"))
            return
        if options.task == "translate":
            self.emit(Note("translation: the drafter transcribes, so its candidates rarely "
                           "match; the budget adapts"))
        self.worker = DrafterWorker(self.drafter, self.target.tokenizer, mel, self.stream,
                                    language, self.emit, turns=self.turns).start()

    def _stop_drafting(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker.join()
            self.worker = None


class AlignedSource(BudgetedSource):
    """One window's candidates: the drafter's stream after where the target's text stands.
    The stream, pointer, budget and blind misses are the run's; a window adds its start time
    (which dates its timestamp guesses) and its end (the pointer goes back to the kept text)."""

    def __init__(self, run: AS2D, window: Window) -> None:
        self.run = run
        self.aligner = run.aligner
        self.stream = run.stream
        self.offset = window.start
        self.tb = run.target.tokenizer.timestamp_begin
        self.eot = run.target.tokenizer.eot
        self.aligner.window_start(self.offset)
        self._shadow: int | None = None  # the candidate that was ready but not offered
        self._openings: dict[str, int] = {}  # the opening times guessed for the pass's start
        self._start: str | None = None  # the kind of start the last proposal was made at
        self._repeats = Budget(prior_acceptance=REPEAT_PRIOR)  # offers of its own repetition
        self._repeating = False  # the last offer was the window's own repetition
        super().__init__(run.budget)

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        """The drafter's aligned words; where it has none (a loop it did not make leaves it
        lost), the window's own repetition, if there is one."""
        self._repeating = False
        self._shadow = None
        cands = self._aligned(context, room)
        if room <= 0 or (cands and (self.aligner.synced or len(cands) > 1)):
            return cands
        # Nothing, or one token from a lost aligner: a repetition is the better evidence.
        again = window_repetition(context, room, self.tb)
        k = self._repeats.choose(len(again)) if len(again) > len(cands) else 0
        if k <= len(cands):
            return cands
        self._repeating = True
        return again[:k]

    def _aligned(self, context: Sequence[int], room: int) -> list[int]:
        aligner, tb, gen = self.aligner, self.tb, context
        opening = self._start = self.start_kind(gen)
        if not aligner.synced:
            aligner.sync()
        # After a closing timestamp, the opening one (OpeningTimes), then the drafter's words.
        self._openings = self.run.times.guesses(gen, self.offset)
        lead = self.run.times.choose(self._openings)
        ready = len(self.stream) - aligner.pos + len(lead)
        if ready <= 0:
            return []
        k = self.budget.choose(min(ready, room))
        # Not offered, the stream's next token still teaches the budget (a zero can recover).
        self._shadow = None
        if k == 0 and aligner.synced and not lead:
            nxt = aligner.candidates(1, opening)
            self._shadow = nxt[0] if nxt else None
        if not aligner.synced:
            # A guess while re-synchronising: cheap, and none after two misses.
            k = min(k, 2) if self.run.blind_misses < 2 else len(lead)
        if k <= len(lead):
            return lead[:k]
        cands = lead + aligner.candidates(k - len(lead), opening)
        # Where the drafter closed a segment, its time as the target's closing timestamp.
        at = self.stream.boundaries.get(aligner.end)
        last = cands[-1] if cands else (gen[-1] if gen else tb)
        if at is not None and last < tb and len(cands) < room and aligner.synced:
            cands += closing_time(at, self.offset, tb)
        return cands

    def start_kind(self, gen: Sequence[int]) -> str | None:
        """Has the target just ended a sentence, or opened a segment within one?"""
        keys = self.run.keys
        if not gen:
            return None
        if gen[-1] < self.tb:
            return SENTENCE if keys.ends_sentence(gen[-1]) else None
        text = [t for t in gen[-8:] if t < self.eot]
        return SENTENCE if not text or keys.ends_sentence(text[-1]) else SEGMENT

    def observe(self, offered: Sequence[int], verdict: Verdict) -> None:
        self.run.times.observe(self._openings, verdict.committed)
        self._openings = {}
        if self._shadow is not None and verdict.committed and (self._repeating or not offered):
            self.budget.shadow(verdict.committed[0] == self._shadow)
        self._shadow = None
        if self._repeating or (not offered and verdict.ran == 1):
            # Not the drafter's offer: its budget and miss count do not learn from it.
            self._repeats.record(verdict.offered, verdict.accepted, verdict.ran, verdict.seconds)
        if self._repeating:
            self._observe_text(verdict)
            return
        if self.aligner.synced or verdict.accepted:
            self.run.blind_misses = 0
        elif verdict.offered:
            self.run.blind_misses += 1
        self._observe_text(verdict)
        super().observe(offered, verdict)

    def _observe_text(self, verdict: Verdict) -> None:
        start = self._start  # the kind of start the pass began at: for its first word
        for t in verdict.committed:
            if t < self.eot:
                self.aligner.observe(t, start)
                start = None

    def finish(self, context: Sequence[int]) -> None:
        self.aligner.rewind(kept_text_tokens(list(context), self.tb))


@dataclass
class _Ahead:
    """A draft of a file the target has not reached yet."""

    mel: LogMel
    language: str | None
    stream: CandidateStream
    worker: DrafterWorker
    held: _HeldEvents


class _HeldEvents:
    """A listener that keeps events until :meth:`release`, then passes them on in order."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._held: list | None = []
        self._lock = threading.Lock()

    def __call__(self, event) -> None:
        with self._lock:
            if self._held is not None:
                self._held.append(event)
                return
        self.listener(event)

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
            for event in held:  # under the lock, so that a new event cannot overtake them
                self.listener(event)
