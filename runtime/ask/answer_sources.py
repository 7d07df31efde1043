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

Before those, ``answers``: where the answer follows one of the candidate spans scored as
answers, the model's own greedy path through them, read off the scoring pass
(:class:`as2d.runtime.ask.tree.TreeSource`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from as2d.runtime.ask.spans import Span, transcript_lines
from as2d.runtime.speculative.lookup import Lookup, LookupSource

SOURCES = ("answers", "transcript", "drafter", "question", "examples")
LOOKUP_SOURCES = SOURCES[1:]  # the texts looked up n-gram style
# Per-candidate acceptance by n-gram match length (1, 2, 3 or more tokens), measured over the
# benchmark's answers (scripts/ask_bench.py): the budgets' starting point before they learn.
PRIOR_ACCEPTANCE = {1: 0.35, 2: 0.45, 3: 0.75}


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


def lookup_source(texts: dict[str, str], encode: Callable[[str], list[int]],
                  names: Sequence[str] = SOURCES, max_ngram: int = 4, min_ngram: int = 1,
                  k_max: int = 16, fold: Callable[[int], object] | None = None) -> LookupSource:
    """The look-up candidates of one answer: the named, non-blank texts, searched in
    :data:`LOOKUP_SOURCES` order (which breaks ties between equally long matches)."""
    lookups = [Lookup(name, encode(texts[name]), max_ngram, fold)
               for name in LOOKUP_SOURCES if name in names and texts[name].strip()]
    return LookupSource(lookups, PRIOR_ACCEPTANCE, min_ngram, k_max)
