"""Which answer policy (:mod:`as2d.runtime.ask.policy`) a transcript's language gets."""

from __future__ import annotations

from as2d.runtime.ask.english.rules import ENGLISH_POLICY
from as2d.runtime.ask.policy import AnswerPolicy, NoPolicy

ENGLISH = ("en", "eng", "english")


def is_english(language: str | None) -> bool:
    """Whether a transcript's language (a Whisper code such as ``"en"``, or a name) is one the
    English rules read; an unknown language (None) is taken as English, as before rules had
    a language."""
    return language is None or language.strip().lower() in ENGLISH


def policy_for(language: str | None) -> AnswerPolicy:
    """The answer policy for a transcript in ``language``."""
    if is_english(language):
        return ENGLISH_POLICY
    return NoPolicy(language)
