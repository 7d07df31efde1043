"""Whether a question can be asked at all: the one rule every face (the command line, the
server, the Python API) applies before anything loads. It reads no language: a question in
any language that has a word and fits the prompt can be asked."""

from __future__ import annotations

MAX_QUESTION_CHARS = 2000  # a question, not a document: the prompt must stay a prompt


def question_error(question: str) -> str | None:
    """Why ``question`` cannot be asked, None when it can: it is empty, or it has no word at
    all ("?", "..."), so that nothing in the transcript can be looked for and any answer would
    be a guess; or it is longer than :data:`MAX_QUESTION_CHARS` (pasted text, not a question:
    it would fill the answering model's context before the transcript). Every face (the
    command line, the server, the Python API) asks this one rule."""
    if not question.strip():
        return "the question is empty"
    if not any(ch.isalnum() for ch in question):
        return "the question has no words"
    if len(question) > MAX_QUESTION_CHARS:
        return f"the question is too long (at most {MAX_QUESTION_CHARS} characters)"
    return None
