"""Text to token ids for prompts, with the user's text kept literal.

The prompt mixes our markup (few-shot labels, chat turns) with text we do not control (the
transcript, the question). Only the first may become control tokens; see :class:`Codec`.
"""

from __future__ import annotations

from collections.abc import Sequence


class Codec:
    """Text → token ids for prompts, with user text kept literal.

    A transcript or a question may contain text that looks like a control token (``"<eos>"``,
    ``"<start_of_turn>"``); encoded normally it would become that token and could end the
    prompt early or fake a turn. User text is therefore encoded with the tokenizer's
    special-token parsing switched off (``encode_special_tokens``), only our own chat markup
    with it on: the tokenizer's ``encode_piece(text, literal)`` does either, safely across
    threads (:class:`as2d.runtime.llm.lm.TokenizerBase`).
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.bos: int | None = getattr(tokenizer, "bos", None)

    def text(self, s: str) -> list[int]:
        """Ids of user text: markup look-alikes inside it are plain text, not control tokens."""
        return self._encode(s, literal=True)

    def markup(self, s: str) -> list[int]:
        """Ids of prompt markup: ``<start_of_turn>`` and the like become their control tokens."""
        return self._encode(s, literal=False)

    def _encode(self, s: str, literal: bool) -> list[int]:
        return self.tokenizer.encode_piece(s, literal) if s else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def newline_ids(self) -> frozenset[int]:
        """Every token whose text holds a line break: a one-line answer ends at any of them
        (cached by the tokenizer: a scan of its vocabulary, or the lean store's list)."""
        return self.tokenizer.newline_ids()
