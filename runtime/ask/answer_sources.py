"""Where an answer's candidates are looked up: the four texts an answer about audio copies.

The paper's point for this task is that the *source* of the generation is a good drafter:
answers about audio mostly repeat what was said (names, phrases, times) or the words of the
question. So candidates are looked up, n-gram style
(:class:`~as2d.runtime.speculative.lookup.LookupSource`), in:

* ``transcript`` — the target's transcript (the text the prompt holds, and more when passages
  had to be selected);
* ``drafter`` — the AS²D drafter's own stream of the same audio (a second hypothesis, which
  differs from the transcript exactly where the recognisers disagree);
* ``question`` — the user's request;
* ``examples`` — the prompt's own few-shot answers, which predict the answer's form ("At 0:0…",
  the full stop and the line break that end it): prompt look-up in its classic sense.

Then three token sequences that need no text (measured on an instruction model, which answers
in its own words: SmolLM2-135M-Instruct on the question set, where they took generation from
1.4x to 1.8x plain greedy):

* ``prompt`` — the whole prompt as the model read it: the instruction and the chat template's
  words, which an instruction model's answer repeats ("using only the transcript");
* ``previous`` — the model's own earlier answers in this :class:`~as2d.runtime.ask.answer.Answerer`
  (most recent first): an instruction model frames its answers alike ("The answer to the
  question is: ...", "The speaker says, ...");
* ``answer`` — the answer written so far (:class:`AnswerLookupSource`), classic prompt look-up
  over the model's own output: a list, a refrain or a loop ("it was the age of ..., it was the
  age of ...", "No.\nNo.\n") is proposed whole from its first occurrence.

Before those, ``answers``: where the answer follows one of the candidate spans scored as
answers, the model's own greedy path through them, read off the scoring pass
(:class:`as2d.runtime.ask.tree.TreeSource`).

Every candidate is verified (:mod:`as2d.runtime.speculative.verify`), so no source changes an
answer, only how many passes it takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from as2d.runtime.ask.spans import Span, transcript_lines
from as2d.runtime.speculative.lookup import Lookup, LookupSource

SOURCES = ("answers", "transcript", "drafter", "question", "examples", "prompt", "previous",
           "answer")
TEXT_SOURCES = SOURCES[1:5]  # the texts looked up n-gram style
LOOKUP_SOURCES = SOURCES[1:7]  # the fixed sequences (texts, the prompt, earlier answers)
PREVIOUS_ANSWERS = 16  # earlier answers an Answerer keeps as candidates (token lists)
# Per-candidate acceptance by n-gram match length (1, 2, 3 or more tokens), measured over the
# benchmark's answers (scripts/ask_bench.py): the budgets' starting point before they learn.
PRIOR_ACCEPTANCE = {1: 0.35, 2: 0.45, 3: 0.75}
# Extra cost of one more row in a pass, relative to a one-row pass, before the budgets measure
# it: ~0.025 for SmolLM2-135M int8 at a 400-token context on two threads (1 row 84 ms, 16 rows
# 110 ms, 32 rows 151 ms), ~0.05 for Gemma 3 270M (6 rows 23 ms, 48 rows 68 ms).
PRIOR_SLOPE = 0.05


def source_texts(spans: Sequence[Span], question: str, drafter_text: str | None,
                 examples: str, timed: bool) -> dict[str, str]:
    """Each source's text, written as the prompt writes it (so its tokens are the prompt's).

    The transcript is the *whole* transcript, also when the prompt holds only selected
    passages, in the prompt's line format, so that a copied line end proposes the line break
    that ends a one-line answer.
    """
    return {"transcript": transcript_lines(spans, timed),
            "drafter": " " + " ".join(drafter_text.split()) if drafter_text else "",
            "question": " " + " ".join(question.split()),
            "examples": examples}


class GrowingLookup(Lookup):
    """A :class:`Lookup` whose sequence grows (the answer being written): :meth:`extend`
    indexes the n-grams that the new tokens give a continuation to."""

    def extend(self, ids: Sequence[int]) -> None:
        new = [int(t) for t in ids]
        self.ids.extend(new)
        if self.fold is not None:
            self.keys.extend(self.fold(t) for t in new)
        self.index.grow(self.keys, len(self.ids) - 1)  # n-grams the new tokens continue


class AnswerLookupSource(LookupSource):
    """The look-ups of one answer, with the answer itself as the last, growing sequence
    (``answer``): before each proposal the tokens committed since the last one (the context
    after ``prompt_len``) are added to it. A match is never the context's own tail (an n-gram
    is indexed only once a token follows it)."""

    def __init__(self, lookups: Sequence[Lookup], prompt_len: int, own: GrowingLookup | None,
                 min_ngram: int = 1, k_max: int = 16) -> None:
        super().__init__(lookups, PRIOR_ACCEPTANCE, min_ngram, k_max, PRIOR_SLOPE)
        self.prompt_len = prompt_len
        self.own = own
        if own is not None:
            self.lookups.append(own)  # (empty for now: LookupSource drops empty sequences)

    def propose(self, context: Sequence[int], room: int) -> list[int]:
        own = self.own
        if own is not None:
            have = self.prompt_len + len(own.ids)
            if len(context) > have:
                own.extend(context[have:])
        return super().propose(context, room)


def lookup_source(texts: dict[str, str], encode: Callable[[str], list[int]],
                  names: Sequence[str] = SOURCES, max_ngram: int = 4, min_ngram: int = 1,
                  k_max: int = 16, fold: Callable[[int], object] | None = None,
                  prompt: Sequence[int] = (), previous: Sequence[Sequence[int]] = ()
                  ) -> AnswerLookupSource:
    """The look-up candidates of one answer: the named, non-blank texts, then the ``prompt``'s
    ids and the ``previous`` answers (most recent first), searched in :data:`LOOKUP_SOURCES`
    order (which breaks ties between equally long matches), and the answer so far."""
    lookups = [Lookup(name, encode(texts[name]), max_ngram, fold)
               for name in TEXT_SOURCES if name in names and texts.get(name, "").strip()]
    if "prompt" in names and prompt:
        lookups.append(Lookup("prompt", prompt, max_ngram, fold))
    if "previous" in names and previous:
        joined = [int(t) for ids in previous for t in ids]
        lookups.append(Lookup("previous", joined, max_ngram, fold))
    own = GrowingLookup("answer", [], max_ngram, fold) if "answer" in names else None
    return AnswerLookupSource(lookups, len(prompt), own, min_ngram, k_max)
