"""Greedy decoding of one window, one token or one verified block at a time.

:class:`WindowDecoder` is the whole of the target's decoding logic. Its only step,
:meth:`WindowDecoder.step`, takes a (possibly empty) list of candidate tokens, runs them in a
single pass after the pending token, applies the logit rules at every position with that
position's own prefix, keeps the longest run of candidates that equal the greedy choice and
commits it together with the target's own next token. With no candidates this *is* plain greedy
decoding; with candidates it is verification. Either way the committed tokens are those
target-only greedy decoding produces, which is what makes every decoder in as2d lossless.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from as2d.runtime.whisper.logits import LogitRules, logprob_of, no_speech_probability
from as2d.runtime.whisper.model import DecoderState


@dataclass
class DecodingResult:
    tokens: list[int]  # generated tokens, end-of-text excluded
    sum_logprob: float
    no_speech_prob: float
    completed: bool  # ended with end-of-text (not cut at the length limit)
    passes: int = 0
    offered: int = 0
    accepted: int = 0
    alone: int = 0
    seconds: float = 0.0  # wall time of the window's decoding (after the target's encoder)

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)


@dataclass
class StepResult:
    committed: list[int]
    offered: int
    accepted: int
    seconds: float
    done: bool
    rows: int = 1  # tokens run through the target in this pass


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    if not raw:
        return 0.0
    return len(raw) / len(zlib.compress(raw))


@dataclass
class WindowDecoder:
    """Target-side decoding state of one window."""

    state: DecoderState
    rules: LogitRules
    prompt: list[int]  # everything before the first sampled token
    sot_index: int
    sample_len: int
    eot: int
    generated: list[int] = field(default_factory=list)  # committed; the last one is pending
    sum_logprob: float = 0.0
    no_speech_prob: float = 0.0
    done: bool = False
    completed: bool = False
    passes: int = 0
    offered: int = 0
    accepted: int = 0
    alone: int = 0
    seconds: float = 0.0

    def start(self) -> StepResult:
        """Run the prompt and choose the first token."""
        t0 = time.perf_counter()
        logits = self.state.forward(self.prompt)
        self.no_speech_prob = no_speech_probability(logits[self.sot_index],
                                                    self.rules.tokenizer.no_speech)
        row = logits[-1]
        token = self.rules.choose(row, [])
        self._commit([token], [row])
        self.passes += 1
        dt = time.perf_counter() - t0
        self.seconds += dt
        return StepResult([token], 0, 0, dt, self.done, rows=len(self.prompt))

    @property
    def room(self) -> int:
        """How many candidates the next step may verify without passing a length limit."""
        if self.done:
            return 0
        by_len = self.sample_len - len(self.generated) - 1
        by_ctx = self.state.capacity - self.state.length - 1
        return max(0, min(by_len, by_ctx))

    def step(self, candidates: Sequence[int] = (), threads: int | None = None) -> StepResult:
        """Verify ``candidates`` after the pending token (none: one plain greedy step).

        ``threads`` picks the decoder session for this pass (None: the model's default)."""
        if self.done:
            raise RuntimeError("window already decoded")
        t0 = time.perf_counter()
        cands = list(candidates)[: self.room]
        base = self.state.length
        logits = self.state.forward([self.generated[-1]] + cands, threads)
        # Each position's prefix is the committed tokens plus the candidates accepted before
        # it: appended to ``generated`` for the rules, then taken off again (``_commit`` adds
        # the block for good).
        prefix = self.generated
        n = len(prefix)
        committed, rows = [], []
        accepted = 0
        try:
            for i, row in enumerate(logits):
                token = self.rules.choose(row, prefix)
                committed.append(token)
                rows.append(row)
                if i < len(cands) and token == cands[i] and token != self.eot:
                    accepted += 1
                    prefix.append(token)
                    continue
                break
        finally:
            del prefix[n:]
        # Keep the pending token and the accepted candidates; forget the rest.
        self.state.truncate(base + 1 + accepted)
        self._commit(committed, rows)
        self.passes += 1
        self.offered += len(cands)
        self.accepted += accepted
        if not cands:
            self.alone += 1
        dt = time.perf_counter() - t0
        self.seconds += dt
        return StepResult(committed, len(cands), accepted, dt, self.done, rows=1 + len(cands))

    def _commit(self, tokens: list[int], rows: list[np.ndarray]) -> None:
        for token, row in zip(tokens, rows):
            self.sum_logprob += logprob_of(row, token)
            if token == self.eot:
                self.done = self.completed = True
                return
            self.generated.append(token)
            # Whisper stops at sample_len tokens, or once the sequence outgrows the context.
            if (len(self.generated) >= self.sample_len
                    or len(self.prompt) + len(self.generated) > self.state.capacity):
                self.done = True
                return

    def result(self) -> DecodingResult:
        return DecodingResult(tokens=list(self.generated), sum_logprob=self.sum_logprob,
                              no_speech_prob=self.no_speech_prob, completed=self.completed,
                              passes=self.passes, offered=self.offered, accepted=self.accepted,
                              alone=self.alone, seconds=self.seconds)
