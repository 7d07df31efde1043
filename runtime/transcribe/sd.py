"""Classic speculative decoding, the baseline AS²D is measured against.

Serial and coupled: before every target pass the drafter catches up with the target's committed
prefix (in its own vocabulary) and drafts ``k`` tokens greedily, while the target waits. The
drafter gets every advantage AS²D's gets (same model and threads, the same shortened encoder
input), so the comparison isolates the scheduling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from as2d.runtime.events import Listener
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.transcribe.drafter import (
    drafting_rules,
    encode_draft,
    make_retokenizer,
    same_vocabulary,
)
from as2d.runtime.transcribe.strategy import BudgetedSource, DraftingStrategy, Window
from as2d.runtime.whisper.features import LogMel
from as2d.runtime.whisper.model import WhisperModel


class SerialSD(DraftingStrategy):
    """A run's drafter, used window by window: one :class:`SerialDrafter` per window."""

    name = "sd"

    def __init__(self, target: WhisperModel, drafter: WhisperModel,
                 listener: Listener | None = None, budget: Budget | None = None) -> None:
        super().__init__(target, drafter, listener, budget)
        self.same_vocab = same_vocabulary(drafter.tokenizer, target.tokenizer)
        self.language: str | None = None

    def begin(self, mel: LogMel, language: str | None, options) -> None:
        super().begin(mel, language, options)
        self.language = language

    def source(self, window: Window) -> BudgetedSource:
        language = window.language or self.language  # a multilingual run's: the window's
        if not self.drafter_understands(language):
            return BudgetedSource(self.budget)
        ctx = encode_draft(self.drafter, self.mel, window.seek, window.size, window.index,
                           self.emit)
        dtk = self.drafter.tokenizer
        return SerialDrafter(self.budget, self.drafter, self.drafter.decoder_state(ctx),
                             dtk.sot_sequence(language if dtk.multilingual else None),
                             self.target.tokenizer, self.same_vocab)


class SerialDrafter(BudgetedSource):
    """Classic SD's candidates for one window: the drafter, kept in step with the target's
    committed tokens, catches up with them before every pass and drafts ``k`` more."""

    def __init__(self, budget: Budget, model: WhisperModel, state, prompt: list[int],
                 target_tk, same_vocab: bool) -> None:
        super().__init__(budget)
        self.model = model
        self.state = state
        self.tk = model.tokenizer
        self.target_tk = target_tk
        self.same_vocab = same_vocab
        self.prompt = prompt
        self.fed: list[int] = []  # drafter tokens in the cache after the prompt
        self.rules = drafting_rules(model)
        self.ts_shift = self.tk.timestamp_begin - target_tk.timestamp_begin
        self.retok = make_retokenizer(self.tk, target_tk)
        self._done_src: list[int] = []  # committed target tokens up to the last timestamp
        self._done_out: list[int] = []  # ... in the drafter's vocabulary
        # Invariant: the cache holds prompt + fed except the last token, which is fed next.
        state.forward(prompt[:-1], logit_rows=1)

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        k = self.budget.choose(room)
        return self.draft(list(context), k) if k > 0 else []

    def finish(self, context: Sequence[int]) -> None:
        self.model.release(self.state)

    def _last(self) -> int:
        return self.fed[-1] if self.fed else self.prompt[-1]

    def _to_drafter(self, target_tokens: list[int]) -> list[int]:
        """The target's committed tokens in the drafter's vocabulary.

        Text is converted a segment at a time (timestamps close segments), so everything up to
        the last timestamp converts the same on every pass: it is kept, and only the open
        segment is converted again (the baseline must not pay for re-tokenising its prefix).
        """
        if self.same_vocab:
            return list(target_tokens)
        src, out = self._done_src, self._done_out
        if target_tokens[: len(src)] != src:
            src, out = [], []
        rest = target_tokens[len(src):]
        ttb = self.target_tk.timestamp_begin
        closed = max((i + 1 for i, t in enumerate(rest) if t >= ttb), default=0)
        if closed:
            src, out = src + rest[:closed], out + self._convert(rest[:closed])
            rest = rest[closed:]
        self._done_src, self._done_out = src, out
        return out + self._convert(rest)

    def _convert(self, target_tokens: list[int]) -> list[int]:
        tk, ttk = self.tk, self.target_tk
        return _by_segment(target_tokens, ttk.timestamp_begin, ttk.eot, self.ts_shift,
                           lambda text: tk.encode(ttk.decode_bytes(text).decode(
                               "utf-8", errors="replace")))

    def _to_target(self, drafter_tokens: list[int]) -> list[int]:
        if self.same_vocab:
            return [t for t in drafter_tokens if t != self.tk.eot]
        return _by_segment(drafter_tokens, self.tk.timestamp_begin, self.tk.eot,
                           -self.ts_shift, lambda text: self.retok.feed(text) + self.retok.flush())

    def draft(self, committed: list[int], k: int) -> list[int]:
        """Catch up with ``committed`` (the target's tokens after its prompt), then draft up
        to ``k`` target tokens greedily."""
        want = self._to_drafter(committed)
        if len(self.prompt) + len(want) + 1 >= self.state.capacity:
            # The target's text, re-tokenised into another vocabulary, can outgrow the
            # drafter's 448 positions (bytes of a script the drafter's vocabulary lacks):
            # nothing left to draft in this window, the target goes on alone.
            return []
        common = 0
        for a, b in zip(self.fed, want):
            if a != b:
                break
            common += 1
        if common < len(self.fed):  # the target rejected part of the last draft
            self.fed = self.fed[:common]
            self.state.truncate(len(self.prompt) + common - 1)
        new = want[common:]
        if new:
            self.state.forward([self._last()] + new[:-1])
            self.fed += new
        room = self.state.capacity - self.state.length - 1
        drafted: list[int] = []
        generated = list(want)
        for _ in range(min(k, room)):
            row = self.state.forward([self._last()])[-1]
            token = self.rules.choose(row, generated)
            if token == self.tk.eot:
                self.state.truncate(self.state.length - 1)  # keep the invariant
                break
            self.fed.append(token)
            drafted.append(token)
            generated.append(token)
            if len(self._to_target(drafted)) >= k:
                break
        return self._to_target(drafted)[:k]


def _by_segment(tokens: Sequence[int], timestamp_begin: int, eot: int, shift: int,
                text_to: Callable[[list[int]], list[int]]) -> list[int]:
    """``tokens`` in another vocabulary: each run of text tokens converted by ``text_to``, each
    timestamp moved by ``shift`` (the vocabularies' timestamps differ by an offset), special
    tokens dropped."""
    out: list[int] = []
    text: list[int] = []
    for t in tokens:
        if t >= timestamp_begin:
            if text:
                out += text_to(text)
                text = []
            out.append(t + shift)
        elif t < eot:
            text.append(t)
    if text:
        out += text_to(text)
    return out
