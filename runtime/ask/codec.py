"""Text to token ids for prompts, with the user's text kept literal.

The prompt mixes our markup (few-shot labels, chat turns) with text we do not control (the
transcript, the question). Only the first may become control tokens; see :class:`Codec`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence


class Codec:
    """Text → token ids for prompts, with user text kept literal.

    A transcript or a question may contain text that looks like a control token (``"<eos>"``,
    ``"<start_of_turn>"``); encoded normally it would become that token and could end the
    prompt early or fake a turn. User text is therefore encoded with the tokenizer's
    special-token parsing switched off (``encode_special_tokens``), only our own chat markup
    with it on. The switch is flipped for the one call under a lock and put back: a copy of
    Gemma's 262k-entry tokenizer would take 1.5 s to build.
    """

    _switch = threading.Lock()

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.tok = tokenizer.tok
        self.bos: int | None = getattr(tokenizer, "bos", None)

    def text(self, s: str) -> list[int]:
        """Ids of user text: markup look-alikes inside it are plain text, not control tokens."""
        return self._encode(s, literal=True)

    def markup(self, s: str) -> list[int]:
        """Ids of prompt markup: ``<start_of_turn>`` and the like become their control tokens."""
        return self._encode(s, literal=False)

    def _encode(self, s: str, literal: bool) -> list[int]:
        if not s:
            return []
        with Codec._switch:  # the flag lives on the shared tokenizer
            before = self.tok.encode_special_tokens
            self.tok.encode_special_tokens = literal
            try:
                return self.tok.encode(s, add_special_tokens=False).ids
            finally:
                self.tok.encode_special_tokens = before

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))

    def newline_ids(self) -> frozenset[int]:
        """Every token whose text holds a line break: a one-line answer ends at any of them.
        (Scanned once per tokenizer: 0.15 s over Gemma's vocabulary.)"""
        cached = _NEWLINE_IDS.get(id(self.tok))
        if cached is not None and cached[0] is self.tok:
            return cached[1]
        ids = set()
        for i in range(self.tok.get_vocab_size(with_added_tokens=True)):
            piece = self.tok.id_to_token(i)
            if piece and ("\n" in piece or piece == "<0x0A>" or "Ċ" in piece):
                ids.add(i)
        found = frozenset(ids)
        _NEWLINE_IDS[id(self.tok)] = (self.tok, found)
        return found


_NEWLINE_IDS: dict[int, tuple[object, frozenset[int]]] = {}
