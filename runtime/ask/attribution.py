"""Who said it: a transcript's passages with their speakers, and the answer to "who said …".

A diarized recording (``as2d ask --diarize``, ``as2d.ask(..., diarize=True)``) gives each
transcript span the speaker talking over most of it (:func:`label_spans`: the same rule that
gives a word its speaker, :func:`as2d.runtime.speakers.assign.speaker_at`); the transcript's
text and times are untouched. Every answer's evidence then says who speaks in it, and a
question the policy reads as "who said X" (:meth:`~as2d.runtime.ask.policy.AnswerPolicy.
who_said`) is answered without the model: the passage that says X is found as every answer's
passages are (:func:`~as2d.runtime.ask.passages.rank_spans`, a quoted phrase first), and the
answer is its speaker — a label (``SPEAKER_01``) or the name a reference clip gave
(``--speaker Ann=ann.wav``). A passage where two people speak goes to the one who speaks
most of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from as2d.runtime.ask.judge import support
from as2d.runtime.ask.passages import rank_spans
from as2d.runtime.ask.spans import Span

# The share of the asked words the passage (with its neighbours) must say: less, and the
# recording does not say who said it (a passage sharing one word of five is not "it").
MIN_SUPPORT = 0.5


def label_spans(spans: Sequence[Span], turns) -> list[Span]:
    """``spans`` with ``speaker`` set from the diarization's ``turns`` (None where no turn is
    near)."""
    from as2d.runtime.speakers.assign import speaker_at

    return [replace(s, speaker=speaker_at(turns, s.start, s.end)) for s in spans]


def has_speakers(spans: Sequence[Span]) -> bool:
    return any(s.speaker is not None for s in spans)


def who_said(spans: Sequence[Span], words: str) -> tuple[str | None, int | None]:
    """``(speaker, span index)`` of the passage that says ``words`` best; ``(None, None)``
    when no passage says enough of them (:data:`MIN_SUPPORT`), ``(None, i)`` when the
    passage has no speaker."""
    ranked = rank_spans(spans, words)
    if not ranked or ranked[0][0] <= 0:
        return None, None
    best = ranked[0][1]
    if support(words, spans, [best]) < MIN_SUPPORT:
        return None, None
    return spans[best].speaker, best
