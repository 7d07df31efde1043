"""Greedy decoding of one Whisper window, one verified pass at a time.

:class:`WindowState` is the target's side of a window: the prompt pass, then passes of the
verification kernel with Whisper's logit rules as the greedy choice. With no candidates a pass
*is* a plain greedy step, so whatever proposes candidates, the window commits what target-only
decoding commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from as2d.runtime.speculative.verify import PassCounts, Verdict, verify
from as2d.runtime.whisper.logits import LogitRules, logprob_of, no_speech_probability
from as2d.runtime.whisper.model import DecoderState
from as2d.runtime.whisper.seeking import compression_ratio

# (offered, verdict, whose texts to show: None for the verdict's own) → one Verified event;
# None where nobody listens (no verdict is assembled for nobody)
Report = Callable[[Sequence[int], Verdict, Verdict | None], None] | None


@dataclass
class DecodingResult:
    """A window's tokens and the confidences the long-form loop judges them by."""

    tokens: list[int]  # generated tokens, end-of-text excluded
    sum_logprob: float
    no_speech_prob: float
    completed: bool  # ended with end-of-text (not cut at the length limit)
    counts: PassCounts = field(default_factory=PassCounts)
    compression: float | None = None  # the text's compression ratio, once measured

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)

    def compression_ratio(self, tokenizer) -> float:
        """The gzip compression ratio of the decode's text, measured once."""
        if self.compression is None:
            self.compression = compression_ratio(tokenizer.decode(self.tokens))
        return self.compression


@dataclass(kw_only=True)
class Decoded:
    """A decode's committed side, what :func:`commit` keeps (a window, a sample of one)."""

    generated: list[int] = field(default_factory=list)  # committed, in order
    sum_logprob: float = 0.0
    done: bool = False
    completed: bool = False
    counts: PassCounts = field(default_factory=PassCounts)

    def decoded(self, no_speech_prob: float) -> DecodingResult:
        """What it has committed so far, with its window's ``no_speech_prob``."""
        return DecodingResult(list(self.generated), self.sum_logprob, no_speech_prob,
                              self.completed, self.counts.copy())


def commit(seq: Decoded, tokens: Sequence[int], rows: Sequence[np.ndarray], eot: int,
           sample_len: int, prompt_len: int, capacity: int) -> None:
    """Whisper's rule for each chosen token in turn: its log-probability counts; end-of-text
    (not kept), ``sample_len`` tokens or the decoder's context end the decode."""
    for token, row in zip(tokens, rows):
        seq.sum_logprob += logprob_of(row, token)
        if token == eot:
            seq.done = seq.completed = True
            return
        seq.generated.append(token)
        if len(seq.generated) >= sample_len or prompt_len + len(seq.generated) > capacity:
            seq.done = True
            return


def prompt_pass(forward, prompt: list[int], sot_index: int, no_speech: int | None
                ) -> tuple[float, np.ndarray]:
    """The pass that runs a window's prompt, for any decoder: ``forward(tokens, logit_rows)``
    gives the rows from the start-of-transcript token on (the previous text's are never read);
    returns the window's no-speech probability (the start-of-transcript row's) and the row the
    first token is chosen from."""
    logits = forward(prompt, logit_rows=len(prompt) - sot_index)
    return no_speech_probability(logits[0], no_speech), logits[-1]


def one_row(state):
    """A pooled state's ``forward`` for its one hypothesis (before the prompt forks it)."""
    return lambda tokens, logit_rows=None: state.forward([tokens], logit_rows)[0]


def room(done: bool, sample_len: int, generated: int, state) -> int:
    """How many candidates a decode's next pass may verify without passing a length limit."""
    if done:
        return 0
    return max(0, min(sample_len - generated - 1, state.capacity - state.length - 1))


@dataclass
class WindowState(Decoded):
    """Target-side decoding state of one window (the last token of ``generated`` is pending:
    the cache does not hold it yet)."""

    state: DecoderState
    rules: LogitRules
    prompt: list[int]  # everything before the first sampled token
    sot_index: int
    sample_len: int
    eot: int
    no_speech_prob: float = 0.0

    def __post_init__(self) -> None:
        self._stops = frozenset({self.eot})

    @property
    def context(self) -> Sequence[int]:
        """The tokens generated so far (what a candidate source continues)."""
        return self.generated

    @property
    def room(self) -> int:
        return room(self.done, self.sample_len, len(self.generated), self.state)

    def start(self) -> Verdict:
        """Run the prompt and choose the first token (a pass that runs the whole prompt)."""
        t0 = time.perf_counter()
        self.no_speech_prob, row = prompt_pass(self.state.forward, self.prompt, self.sot_index,
                                               self.rules.tokenizer.no_speech)
        token = self.rules.choose(row, [])
        self._commit([token], [row])
        verdict = Verdict([token], [row], 0, 0, len(self.prompt), time.perf_counter() - t0,
                          token == self.eot)
        # Not a pass "alone": no candidate could have come before the first token.
        self.counts.count(0, 0, verdict.seconds, alone=False)
        return verdict

    def step(self, candidates: Sequence[int] = ()) -> Verdict:
        """Verify ``candidates`` after the pending token (none: one plain greedy step)."""
        if self.done:
            raise RuntimeError("window already decoded")
        t0 = time.perf_counter()
        verdict = verify(self.state, self.generated[-1], list(candidates)[: self.room],
                         self.generated, self.rules.choose, self._stops)
        self._commit(verdict.committed, verdict.logits)
        # The pass's time includes committing, as it always has for a step.
        verdict.seconds = time.perf_counter() - t0
        self.counts.add(verdict)
        return verdict

    def _commit(self, tokens: list[int], rows: list[np.ndarray]) -> None:
        commit(self, tokens, rows, self.eot, self.sample_len, len(self.prompt),
               self.state.capacity)

    def result(self) -> DecodingResult:
        return self.decoded(self.no_speech_prob)
