"""Whisper's logit rules and the greedy choice, as pure functions of one position's prefix.

Target-only decoding applies these rules to the next position; verification applies them to
every position of a verified block with *that position's* prefix (committed tokens plus the
candidates before it). Both call :meth:`LogitRules.choose`, so both make the same choice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from as2d.runtime.whisper.tokenizer import WhisperTokenizer

NEG_INF = np.float32(-np.inf)


@dataclass
class LogitRules:
    """The rules of one window: what openai-whisper's greedy decoder applies, in its order.

    1. suppress blank: at the first sampled position, no space-only token and no end-of-text;
    2. suppress tokens: non-speech symbols and task tokens, always;
    3. timestamp rules (when timestamps are on): timestamps come in pairs, never decrease,
       the first token is a timestamp no later than ``max_initial_timestamp``, and a timestamp
       is forced when the timestamp tokens together outweigh the best text token.

    Then the choice: greedy at ``temperature`` 0, else one draw from ``rng`` per committed
    position, in order (a fallback's sampled decode: :meth:`sampling`). The log-probabilities
    a window is judged by stay those of the rule-masked logits, not divided by the
    temperature, as in whisper.
    """

    tokenizer: WhisperTokenizer
    n_vocab: int
    timestamps: bool = True
    suppress_blank: bool = True
    suppress: tuple[int, ...] = ()
    max_initial_timestamp: float = 1.0
    temperature: float = 0.0
    rng: np.random.Generator | None = None

    def __post_init__(self) -> None:
        tk = self.tokenizer
        self.eot = tk.eot
        self.ts_begin = tk.timestamp_begin
        self.no_timestamps = tk.no_timestamps
        self._suppress = np.array(sorted(set(self.suppress)), dtype=np.int64)
        self._blank = np.array(sorted(set(tk.encode(" ") + [tk.eot])), dtype=np.int64)
        self._max_initial = (None if self.max_initial_timestamp is None else
                             int(round(self.max_initial_timestamp / 0.02)))

    def apply(self, row: np.ndarray, generated: list[int]) -> np.ndarray:
        """Mask ``row`` (logits of one position, modified in place) given the tokens generated
        so far in this window (after the prompt)."""
        if self.suppress_blank and not generated:
            row[self._blank] = NEG_INF
        if len(self._suppress):
            row[self._suppress] = NEG_INF
        if self.timestamps:
            self._timestamp_rules(row, generated)
        return row

    def _timestamp_rules(self, row: np.ndarray, seq: list[int]) -> None:
        tb = self.ts_begin
        row[self.no_timestamps] = NEG_INF
        last_ts = len(seq) >= 1 and seq[-1] >= tb
        penultimate_ts = len(seq) < 2 or seq[-2] >= tb
        if last_ts:
            if penultimate_ts:
                row[tb:] = NEG_INF  # a pair just closed: text (or end) must follow
            else:
                row[: self.eot] = NEG_INF  # an opening timestamp needs its partner
        # Timestamps never go backwards; a closing one may repeat the opening one.
        last = None
        for t in reversed(seq):
            if t >= tb:
                last = t
                break
        if last is not None:
            floor = last if (last_ts and not penultimate_ts) else last + 1
            row[tb:floor] = NEG_INF
        if not seq:
            row[:tb] = NEG_INF  # a window starts with a timestamp
            if self._max_initial is not None:
                row[tb + self._max_initial + 1 :] = NEG_INF
        # If the timestamps together are more probable than any single text token, pick one.
        ts = row[tb:]
        ts_max = ts.max()
        if ts_max != NEG_INF:
            ts_mass = ts_max + np.log(np.exp(ts - ts_max).sum())
            if ts_mass > row[:tb].max():
                row[:tb] = NEG_INF

    def sampling(self, temperature: float, rng: np.random.Generator) -> LogitRules:
        """These rules, drawing at ``temperature`` from ``rng`` instead of choosing greedily."""
        return replace(self, temperature=temperature, rng=rng)

    def choose(self, row: np.ndarray, generated: list[int]) -> int:
        """The token at this position (row is masked in place): greedy, or drawn."""
        if self.temperature > 0:
            return sample(self.apply(row, generated), self.temperature, self.rng)
        return int(np.argmax(self.apply(row, generated)))


def sample(row: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """One token drawn from ``softmax(row / temperature)`` (masked entries are ``-inf``)."""
    x = row.astype(np.float64) / temperature
    x -= x.max()
    cdf = np.cumsum(np.exp(x))
    # u < cdf[-1], and a token of probability 0 owns an empty interval: never drawn.
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))


def logprob_of(row: np.ndarray, token: int) -> float:
    """log-softmax of ``row`` at ``token`` (row already masked)."""
    m = row.max()
    return float(row[token] - m - np.log(np.exp(row - m).sum()))


def no_speech_probability(raw_row: np.ndarray, no_speech: int | None) -> float:
    """Softmax probability of the no-speech token at the start-of-transcript position."""
    if no_speech is None:
        return 0.0
    m = raw_row.max()
    e = np.exp(raw_row - m)
    return float(e[no_speech] / e.sum())
