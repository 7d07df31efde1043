"""Lossless speculative generation of an answer: the LLM twin of Whisper window decoding.

After the prompt is prefilled, the answer advances by verified passes
(:func:`as2d.runtime.speculative.verify.verify` driven by
:func:`as2d.runtime.speculative.candidates.run`): each pass runs ``[pending] + candidates``,
keeps the longest run of candidates equal to the model's greedy choices plus its own next
token, and drops the rest of the cache. With no candidates a pass is a plain greedy step, so
target-only generation (:func:`greedy_generate`) is this same code and speculative answers are
token-identical to it, provided the model computes every row of a pass independently of the
others (the Gemma bundle is built so; a Hugging Face graph is checked at load, see
:mod:`as2d.runtime.llm.hf_lm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from as2d.runtime.ask.answer_events import AnswerStep, Prefilled
from as2d.runtime.events import Listener, ignore
from as2d.runtime.llm.prefix_cache import PrefixCache
from as2d.runtime.speculative.candidates import NO_CANDIDATES, run
from as2d.runtime.speculative.lookup import LookupSource
from as2d.runtime.speculative.verify import PassCounts, Verdict, argmax, verify


class LMState(Protocol):
    """One sequence's KV cache (:class:`as2d.runtime.llm.lm.LLMState` and the HF twin)."""

    length: int
    capacity: int

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray: ...

    def truncate(self, length: int) -> None: ...


class LanguageModel(Protocol):
    """What answering needs of a model (:class:`as2d.runtime.llm.lm.CausalLM`,
    :class:`as2d.runtime.llm.hf_lm.HFCausalLM`)."""

    name: str
    tokenizer: object  # .bos, .decode(ids), .encode_piece(text, literal) (lm.TokenizerBase)
    stop_ids: tuple[int, ...]
    capacity: int
    lossless: bool  # its passes are row-exact (as2d.runtime.rows): candidates may be verified
    chat_template: str | None  # rendered for the "instruct" prompt style
    trees: bool  # takes tree passes (candidates scored as one tree)

    def state(self) -> LMState: ...

    def release(self, state: LMState) -> None: ...

    def prefill(self, state: LMState, prompt_ids: Sequence[int]) -> np.ndarray: ...


@dataclass
class Generation:
    tokens: list[int]  # committed tokens, the stop token included when there was one
    stopped: str  # "stop", "length" or "context"
    prefill_seconds: float
    seconds: float  # after the prefill
    passes: int


class AnswerDecoding:
    """One answer after its prefill, as a :class:`~as2d.runtime.speculative.candidates.Decoding`.

    The stop rule (a stop id ends the answer, the stop id included; then ``max_new`` tokens;
    then a full cache) is applied after every pass to the committed tokens, which the kernel
    commits in order and never past a stop id, exactly as plain generation applies it.
    """

    def __init__(self, state: LMState, prompt_ids: Sequence[int], first: int, max_new: int,
                 stops: frozenset[int]) -> None:
        self.state = state
        self.max_new = max_new
        self.stops = stops
        self.tokens = [first]
        self._context = list(prompt_ids) + [first]
        self.counts = PassCounts()
        self.stopped = self._stop_reason()

    @property
    def done(self) -> bool:
        return self.stopped is not None

    @property
    def context(self) -> Sequence[int]:
        return self._context

    @property
    def room(self) -> int:
        """Candidates the next pass may verify without passing ``max_new`` or the cache."""
        st = self.state
        return max(0, min(self.max_new - len(self.tokens) - 1, st.capacity - st.length - 1))

    def step(self, candidates: Sequence[int] = ()) -> Verdict:
        verdict = verify(self.state, self.tokens[-1], candidates, self._context, argmax,
                         self.stops)
        self.tokens.extend(verdict.committed)
        self._context.extend(verdict.committed)
        self.counts.add(verdict)
        self.stopped = self._stop_reason()
        return verdict

    def _stop_reason(self) -> str | None:
        if self.tokens[-1] in self.stops:
            return "stop"
        if len(self.tokens) >= self.max_new:
            return "length"
        if self.state.length >= self.state.capacity:
            return "context"
        return None


class SpeculativeGenerator:
    """Greedy generation with verified candidates, reporting every pass as events
    (:class:`Prefilled`, then one :class:`AnswerStep` per pass)."""

    def __init__(self, model: LanguageModel, listener: Listener | None = None,
                 prefix: PrefixCache | None = None) -> None:
        self.model = model
        self.emit = listener or ignore
        self.prefix = prefix

    def generate(self, prompt_ids: Sequence[int], max_new: int, stop_ids: Iterable[int],
                 candidates: LookupSource | None = None,
                 then: Callable[[LMState, int, np.ndarray], None] | None = None,
                 static: int = 0,
                 before: Callable[[LMState, int, np.ndarray], None] | None = None,
                 context: int = 0) -> Generation:
        """Up to ``max_new`` tokens after ``prompt_ids`` (at least one, from the prefill);
        ``candidates=None`` is target-only generation through the same passes.
        ``before(state, prompt_len, prefill_logits)`` runs after the prefill and must leave the
        cache as it found it (to score other answers under the same prompt, and hand
        ``candidates`` what that found: :mod:`as2d.runtime.ask.tree`); ``then(...)`` runs after
        the answer, before the cache is released, and may change it.
        The first ``static`` prompt ids are a fixed head whose KV rows the ``prefix`` cache
        may hold (loaded rows are the prefill's rows, bit for bit), and so are the ids up to
        ``context`` (a transcript read whole, which every question about it repeats; 0: none).
        """
        model = self.model
        decode = model.tokenizer.decode
        stops = frozenset(int(i) for i in stop_ids)
        state = model.state()
        try:
            t0 = time.perf_counter()
            cached = 0
            if self.prefix is not None and static:
                first_logits, cached = self.prefix.prefill(model, state, prompt_ids, static,
                                                            context)
            else:
                first_logits = model.prefill(state, list(prompt_ids))
            first = int(np.argmax(first_logits))
            prefill_s = time.perf_counter() - t0
            self.emit(Prefilled(len(prompt_ids), prefill_s, decode([first]), cached))
            if before is not None:
                before(state, len(prompt_ids), first_logits)
                if state.length != len(prompt_ids):
                    raise RuntimeError("the scoring step changed the prompt's cache")
            decoding = AnswerDecoding(state, prompt_ids, first, max_new, stops)

            def on_pass(offered: Sequence[int], verdict: Verdict) -> None:
                found = candidates.last if candidates is not None else None
                committed, accepted = verdict.committed, verdict.accepted
                self.emit(AnswerStep(
                    len(offered), accepted,
                    found.lookup.name if found is not None and found.lookup else None,
                    tuple(committed), decode(committed[:accepted]), decode(committed[accepted:]),
                    decode(list(offered[accepted:])), verdict.seconds,
                    found.match if found is not None else 0))

            source = candidates if candidates is not None else NO_CANDIDATES
            try:
                run(decoding, source, on_pass)
            finally:
                source.finish(decoding.context)
            if then is not None:
                then(state, len(prompt_ids), first_logits)
            return Generation(decoding.tokens, decoding.stopped, prefill_s,
                              decoding.counts.seconds, decoding.counts.passes)
        finally:
            model.release(state)


def greedy_generate(model: LanguageModel, prompt_ids: Sequence[int], max_new: int,
                    stop_ids: Iterable[int] | None = None) -> list[int]:
    """Target-only greedy tokens (the stop token last when one was produced): the generator
    with no candidates, so that plain and speculative answers share one code path.
    ``stop_ids=None`` means the model's own stop ids."""
    stops = model.stop_ids if stop_ids is None else stop_ids
    return SpeculativeGenerator(model).generate(prompt_ids, max_new, stops).tokens
