"""The drafter worker: transcribes the audio on its own thread and streams candidate words.

It follows its own history, never the target's: fixed 30-s windows one after another (no
seeking back, so nothing it streams is ever withdrawn), greedy, with timestamps only to date
its words. Because the target verifies everything, the drafter may cut corners the target may
not: the last, partial window is encoded at its real length instead of padded to 30 s.
"""

from __future__ import annotations

import threading
import time

from as2d.runtime.events import Drafted, Encoded, Listener, Note, WindowStarted, ignore
from as2d.runtime.speculative.stream import CandidateStream, Retokenizer
from as2d.runtime.transcribe.turns import EncoderTurns
from as2d.runtime.transcribe.window import WindowState
from as2d.runtime.whisper.features import FRAMES_PER_SECOND, N_FRAMES, LogMel
from as2d.runtime.whisper.logits import LogitRules
from as2d.runtime.whisper.model import AudioContext, WhisperModel, detect_language
from as2d.runtime.whisper.seeking import INPUT_STRIDE, cut_repetition, seek_split
from as2d.runtime.whisper.tokenizer import TIME_PRECISION, WhisperTokenizer

DRAFT_PAD_FRAMES = 300  # padding frames a drafter window keeps (3 s of the 30-s padding)


def encode_draft(model: WhisperModel, mel: LogMel, seek: int, size: int, window: int,
                 emit: Listener, run_options=None) -> AudioContext:
    """The drafter's encoding of ``size`` frames of ``mel`` from ``seek`` (window ``window``),
    in its own mel bands (tiny.en's 80 for a 128-band target), announced. Its input is the
    audio plus a little of the padding Whisper was trained with, so the drafter still hears
    where the audio ends (the conv stem wants an even length)."""
    t0 = time.perf_counter()
    pad_to = min(N_FRAMES, size + DRAFT_PAD_FRAMES + (size % 2))
    ctx = model.encode(mel.for_mels(model.dims.n_mels).window(seek, size, pad_to=pad_to),
                       run_options)
    emit(Encoded(window, time.perf_counter() - t0, ctx.n_frames, worker="drafter"))
    return ctx


def drafting_rules(model: WhisperModel) -> LogitRules:
    """A drafter's logit rules (AS²D's worker and classic SD alike): greedy, with timestamps
    (they date its words and mark its segment ends)."""
    tk = model.tokenizer
    return LogitRules(tk, model.dims.n_vocab, timestamps=True, suppress=tuple(tk.suppress_tokens()))


def same_vocabulary(a: WhisperTokenizer, b: WhisperTokenizer) -> bool:
    return (a.n_vocab == b.n_vocab and a.eot == b.eot
            and a.tok.get_vocab_size() == b.tok.get_vocab_size())


def make_retokenizer(drafter: WhisperTokenizer, target: WhisperTokenizer) -> Retokenizer:
    if same_vocabulary(drafter, target):
        return Retokenizer(None, target.encode_piece, None, drafter.eot)
    return Retokenizer(drafter.token_bytes, target.encode_piece,
                       target.tok.pre_tokenizer.pre_tokenize_str, drafter.eot)


class DrafterWorker:
    """One file's drafting, on a daemon thread; :meth:`stop` ends it after the current step."""

    def __init__(self, model: WhisperModel, target_tokenizer: WhisperTokenizer, mel: LogMel,
                 stream: CandidateStream, language: str | None = "en",
                 listener: Listener | None = None,
                 after: DrafterWorker | None = None,
                 turns: EncoderTurns | None = None) -> None:
        self.model = model
        self.turns = turns  # yields the cores to the target's encoder when ahead of it
        # Drafting the next file: begin as soon as ``after`` (this file's predecessor) is done,
        # without waiting for the target to reach this file.
        self.after = after
        self.mel = mel
        self.stream = stream
        self.language = language
        self.emit = listener or ignore
        self.retok: Retokenizer | None = None  # made on the thread: see _run
        self._target_tk = target_tokenizer
        self._stop = threading.Event()
        import onnxruntime as ort

        self._run_options = ort.RunOptions()  # lets stop() abandon an encoder run
        self._thread = threading.Thread(target=self._run, name="as2d-drafter", daemon=True)
        self._open: list[int] = []  # drafter text of the segment being decoded
        self._seg_time = 0.0

    def start(self) -> DrafterWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._run_options.terminate = True

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            # Byte tables of both vocabularies (~0.1 s of Python): built here, while the target
            # encodes (onnxruntime leaves the GIL free), not on the target's thread before it.
            if self._stop.is_set():
                return  # stopped before it began (a skipped file): nothing to build
            self.retok = make_retokenizer(self.model.tokenizer, self._target_tk)
            self._target_tk.token_bytes  # noqa: B018 - warms the table the aligner reads too
            if self.after is not None:
                self.after.join()  # one drafter session: one file after another
                self.after = None
            self._draft()
        except BaseException as exc:  # the target goes on alone; say why
            if not self._stop.is_set():  # a requested stop is no failure
                self.emit(Note(f"drafter stopped ({type(exc).__name__}: {exc}); the target "
                               "continues alone", level="warning"))
        finally:
            self.stream.finish()

    def _draft(self) -> None:
        model, tk = self.model, self.model.tokenizer
        rules = drafting_rules(model)
        # None (a multilingual run, a multilingual drafter): each window in the language the
        # drafter hears in it.
        per_window = tk.multilingual and self.language is None
        prompt = tk.sot_sequence(self.language if tk.multilingual else None)
        sample_len = model.dims.n_text_ctx // 2
        seek, window = 0, 0
        n = self.mel.n_frames
        while seek < n and not self._stop.is_set():
            size = min(N_FRAMES, n - seek)
            offset = seek / FRAMES_PER_SECOND
            self.emit(WindowStarted(window, offset, (seek + size) / FRAMES_PER_SECOND,
                                    worker="drafter"))
            self._yield(offset)
            ctx = encode_draft(model, self.mel, seek, size, window, self.emit,
                               self._run_options)
            if per_window:
                prompt = tk.sot_sequence(detect_language(model, ctx)[0])
            state = model.decoder_state(ctx)
            self._open, self._seg_time = [], offset
            try:
                dec = WindowState(state, rules, prompt, 0, sample_len, tk.eot)
                step = dec.start()
                self._take(step.committed, offset, step.seconds)
                content_end = size / FRAMES_PER_SECOND
                while not dec.done and not self._stop.is_set():
                    self._yield(offset)
                    step = dec.step()
                    self._take(step.committed, offset, step.seconds)
                    if self._runaway(dec.generated, content_end):
                        break
            finally:
                model.release(state)
            # Seek like the target does: a window that does not end on a single timestamp
            # resumes at its last closed segment, and its unclosed text is decoded again
            # (it was never streamed, so nothing has to be taken back).
            tokens = dec.generated
            cuts, single_ending = seek_split(tokens, tk.timestamp_begin)
            advance = size
            if cuts and not single_ending:
                advance = (tokens[cuts[-1] - 1] - tk.timestamp_begin) * INPUT_STRIDE
                self._open = []
            elif self._open:
                self._close_segment(offset + content_end)
            seek += advance if advance > 0 else size
            window += 1

    def _yield(self, drafted_until: float) -> None:
        if self.turns is not None:
            self.turns.wait_if_ahead(self.mel, drafted_until, self._stop)

    def _runaway(self, generated: list[int], content_end: float) -> bool:
        """A drafter that hears no end to the audio (it was not padded with silence) may run
        on past it or loop; stop its window once it has timed a segment at the audio's end
        or repeats itself."""
        tb = self.model.tokenizer.timestamp_begin
        if len(generated) >= 2 and generated[-1] >= tb and generated[-2] < tb:
            if (generated[-1] - tb) * TIME_PRECISION >= content_end - 0.3:
                return True
        # The same text (a period of up to 16 tokens) three times in a row at the end.
        tail = generated[-64:]
        return len(cut_repetition(tail, tb, min_repeats=3, max_period=16)) < len(tail)

    def _take(self, committed: list[int], offset: float, seconds: float) -> None:
        """Collect the drafter's tokens; stream a segment's words once it is closed."""
        tk = self.model.tokenizer
        tb = tk.timestamp_begin
        for t in committed:
            if t >= tb:
                at = offset + (t - tb) * TIME_PRECISION
                if self._open:
                    self._close_segment(at)
                self._seg_time = at
            elif t < tk.eot:
                self._open.append(t)
        self.emit(Drafted((), "", len(self.stream), self._seg_time, seconds))

    def _close_segment(self, end_time: float) -> None:
        ids = self.retok.feed(self._open) + self.retok.flush()
        self._open = []
        if ids:
            self.stream.extend(ids, self._seg_time)
        # The target will likely put its own timestamps here.
        self.stream.mark_boundary(end_time)
        self.emit(Drafted(tuple(ids), self._target_tk.decode(ids), len(self.stream),
                          self._seg_time, 0.0))
