"""Audio question answering: a transcript, a question, and a lossless speculative answer.

``as2d ask`` first transcribes (AS²D, as ``transcribe`` does), then prompts the answering LLM
with the transcript and the question. The paper's point for this task is that the *source*
of the generation is a good drafter: answers about audio mostly repeat what was said (names,
phrases, times) or the words of the question. So the answer is generated with candidates
looked up, n-gram style, in four sources:

* ``transcript`` — the target's transcript (the text the prompt holds, and more when passages
  had to be selected);
* ``drafter`` — the AS²D drafter's own stream of the same audio (a second hypothesis, which
  differs from the transcript exactly where the recognisers disagree);
* ``question`` — the user's request;
* ``examples`` — the prompt's own few-shot answers, which predict the answer's form ("At 0:0…",
  the full stop and the line break that end it): prompt lookup in its classic sense.

Before each pass the longest suffix of the text so far that occurs in a source is found, and
what followed it there is proposed. The answering model verifies the candidates in one pass
(:class:`SpeculativeGenerator`, the LLM twin of :class:`as2d.runtime.transcribe.window.WindowDecoder`): it
keeps the longest run that equals its own greedy choice, plus its own next token, and drops the
rest of the cache. The answer is therefore token-identical to plain greedy generation, provided
the model computes every row of a pass independently of the others (the Gemma bundle is built
so; a Hugging Face graph is checked at load, see :mod:`as2d.runtime.ask.hf_lm`). How many candidates
to verify is the :class:`~as2d.runtime.speculative.budget.Budget`'s choice, per source, from measured acceptance
and pass cost.

The default answering model (Gemma 3 270M) is a *base* model: it follows examples, not
instructions. The prompt is therefore few-shot: three invented transcripts, each followed by
several questions with short answers copied from it (which also makes answers good to copy).
Times (``[m:ss]`` at the start of each line) are shown only when the question asks *when*:
measured on ``bench/ask_questions.json`` with ``scripts/ask_bench.py`` that scored 14/26,
against 12/26 with times on every line, 12/26 without times, 12/26 with one question per
example and 11/26 inside Gemma's chat markup. Instruction-tuned ``--llm`` models with a chat
template get one plain instruction instead (style ``instruct``).

A transcript longer than the model's context is never cut silently: the passages that share
the most words with the question are selected (BM25 over transcript windows), kept in time
order with ``[...]`` where text was left out, and the answer says so (:class:`PromptPlan`).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

import numpy as np

from as2d.runtime.ask.events import AnswerDone, AnswerStats, AnswerStatsCollector, AnswerStep, AskStarted, \
    Prefilled
from as2d.runtime.speculative.budget import Budget
from as2d.runtime.events import Listener, Note, fanout, ignore

SOURCES = ("transcript", "drafter", "question", "examples")
DEFAULT_MAX_TOKENS = 48
# Per-candidate acceptance by n-gram match length (1, 2, 3 or more tokens), measured over the
# benchmark's answers (scripts/ask_bench.py): the budget's starting point before it learns.
PRIOR_ACCEPTANCE = {1: 0.35, 2: 0.45, 3: 0.75}


# ---------------------------------------------------------------------------------------------
# transcript spans
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Span:
    """One transcript segment: audio times in seconds and its text."""

    start: float
    end: float
    text: str

    def to_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3),
                "text": self.text.strip()}


def spans_from_segments(segments: Iterable) -> list[Span]:
    """Spans from :class:`as2d.runtime.transcribe.transcriber.Segment` objects (or anything with start, end,
    text), blank ones dropped."""
    out = []
    for s in segments:
        text = " ".join(str(s.text).split())
        if text:
            out.append(Span(float(s.start), float(s.end), text))
    return out


def format_time(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour): short, and the way people say times in audio."""
    s = max(0, int(seconds + 0.5))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


# ---------------------------------------------------------------------------------------------
# model interface (as2d.runtime.ask.lm.CausalLM and as2d.runtime.ask.hf_lm.HFCausalLM)
# ---------------------------------------------------------------------------------------------

class LMState(Protocol):
    length: int
    capacity: int

    def forward(self, tokens: Sequence[int], logit_rows: int | None = None) -> np.ndarray: ...

    def truncate(self, length: int) -> None: ...


class LanguageModel(Protocol):
    name: str
    tokenizer: object  # .tok (tokenizers.Tokenizer), .bos, .decode(ids)
    stop_ids: tuple[int, ...]
    capacity: int

    def state(self) -> LMState: ...

    def release(self, state: LMState) -> None: ...

    def prefill(self, state: LMState, prompt_ids: Sequence[int]) -> np.ndarray: ...


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


# ---------------------------------------------------------------------------------------------
# prompts
# ---------------------------------------------------------------------------------------------

# Invented examples (nothing from the benchmark clips). Each transcript is followed by several
# questions, as a user would ask them: who/what/where/how answered by a short span of the
# transcript, "when" answered by the time of the line that holds the words. A timed prompt shows
# the "when" questions, an untimed one the others (see PromptBuilder).
_EXAMPLES: tuple[tuple[tuple[tuple[float, str], ...], tuple[tuple[str, str], ...]], ...] = (
    (((0.0, "Good morning, this is Captain Harris speaking from the flight deck."),
      (4.2, "We will be landing in Lisbon in about forty minutes."),
      (8.5, "The weather there is sunny, with a temperature of twenty-two degrees.")),
     (("Who is speaking from the flight deck?", "Captain Harris."),
      ("Where will we be landing?", "In Lisbon."),
      ("When does the captain mention the weather?", "At 0:08."))),
    (((0.0, "Mary planted the roses by the garden wall."),
      (3.1, "Her brother Tom painted the old fence blue."),
      (7.4, "In the evening they sat together under the apple tree."),
      (11.0, "It was the best summer of their lives, and the last one.")),
     (("What colour did Tom paint the fence?", "Blue."),
      ("Mary planted the roses, and what did Tom do?", "He painted the old fence blue."),
      ("When does the speaker talk about the apple tree?", "At 0:07."),
      ("What was it the best of?", "Summer."))),
    (((0.0, "Are you ready?"),
      (1.2, "No."),
      (2.0, "Then hurry up, we are late."),
      (4.5, "We walk slowly because the road is icy.")),
     (("What is the reply to 'Are you ready?'", "No."),
      ("How do they walk?", "Slowly."),
      ("Why do they walk slowly?", "Because the road is icy."))),
)

# Measured on bench/ask_questions.json with Gemma 3 270M int8 (scripts/ask_bench.py; the
# figures are in the module's report): times only where the question is about time scored best.
STYLES = {
    "qa": "few-shot Transcript/Question/Answer blocks, several questions per example; [m:ss] "
          "times on the transcript lines only when the question asks when (the default)",
    "qa-timed": "the same with [m:ss] times on every line, whatever the question",
    "qa-plain": "the same without any times ('when' questions lose their evidence)",
    "qa-single": "one question per example instead of several, times as in qa",
    "chat": "qa inside Gemma's <start_of_turn> markup",
    "instruct": "one instruction with the transcript and the question, in the model's chat "
                "template (for instruction-tuned --llm models)",
}
DEFAULT_STYLE = "qa"

_INTRO = ("Each transcript below is followed by questions about it and short answers taken "
          "from the transcript.\n\n")
_WHEN = re.compile(r"\b(when|what time|at what point|at what moment|how long|how soon|"
                   r"which minute|which second|timestamp)\b", re.I)


def asks_about_time(question: str) -> bool:
    """Whether a question is about *when* something is said (so times belong in the prompt)."""
    return bool(_WHEN.search(question))


def _lines(spans: Sequence[Span], timed: bool, gaps: Sequence[bool] = ()) -> str:
    """Transcript lines; ``gaps[i]`` puts a ``[...]`` line before span ``i`` (left-out text)."""
    out = []
    for i, s in enumerate(spans):
        if i < len(gaps) and gaps[i]:
            out.append("[...]")
        out.append(f"[{format_time(s.start)}] {s.text.strip()}" if timed else s.text.strip())
    return "\n".join(out)


@dataclass
class PromptPlan:
    """The prompt the answering model reads, and what of the transcript it holds."""

    ids: list[int]
    text: str
    spans: list[Span]  # transcript spans in the prompt, in time order
    selected: bool  # not the whole transcript: passages were selected
    note: str | None  # said to the user when ``selected``
    transcript_tokens: int  # the whole transcript, in the model's tokens
    style: str = DEFAULT_STYLE
    timed: bool = True  # the transcript lines carry [m:ss] times
    stop_ids: frozenset[int] = frozenset()
    one_line: bool = True  # the answer ends at the first line break


class PromptBuilder:
    """Builds prompts in one of :data:`STYLES` and fits the transcript into the context."""

    def __init__(self, codec: Codec, style: str = DEFAULT_STYLE, chat_template: str | None = None,
                 eos_ids: Iterable[int] = (), join_space: bool = False) -> None:
        if style not in STYLES:
            raise ValueError(f"unknown prompt style {style!r} (known: {', '.join(STYLES)})")
        if style == "instruct" and not chat_template:
            raise ValueError("the instruct style needs a model with a chat template")
        self.codec = codec
        self.style = style
        self.chat_template = chat_template
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.join_space = join_space

    def timed(self, question: str) -> bool:
        if self.style in ("qa-timed", "instruct"):
            return True
        if self.style == "qa-plain":
            return False
        return asks_about_time(question)

    # -- rendering ------------------------------------------------------------------------------
    def examples_text(self, timed: bool) -> str:
        """The few-shot blocks as the prompt shows them (empty for the instruct style)."""
        return "" if self.style == "instruct" else self._blocks(timed)

    def _blocks(self, timed: bool) -> str:
        out = []
        for lines, qas in _EXAMPLES:
            text = "\n".join(f"[{format_time(t)}] {s}" if timed else s for t, s in lines)
            if self.style == "qa-single":
                qas = qas[:1] if not timed else tuple(qa for qa in qas
                                                      if asks_about_time(qa[0]))[:1]
            elif self.style != "qa-timed":
                qas = tuple(qa for qa in qas if asks_about_time(qa[0]) == timed)
            if not qas:
                continue
            out.append(f"Transcript:\n{text}\n"
                       + "".join(f"Question: {q}\nAnswer: {a}\n" for q, a in qas) + "\n")
        return "".join(out)

    def render(self, transcript: str, question: str, timed: bool) -> list[tuple[str, bool]]:
        """The prompt as pieces ``(text, literal)``: literal pieces are user text."""
        q = " ".join(question.split())
        if self.style == "instruct":
            return self._render_instruct(transcript, q)
        head = _INTRO + self._blocks(timed) + "Transcript:\n"
        pieces: list[tuple[str, bool]] = []
        if self.style == "chat":
            pieces += [("<start_of_turn>user\n", False), (head, True)]
        else:
            pieces.append((head, False))
        pieces += [(transcript, True), ("\nQuestion: ", False), (q, True)]
        if self.style == "chat":
            pieces.append(("<end_of_turn>\n<start_of_turn>model\nAnswer:", False))
        else:
            pieces.append(("\nAnswer:", False))
        return pieces

    def _render_instruct(self, transcript: str, q: str) -> list[tuple[str, bool]]:
        from jinja2 import Environment

        marker_t, marker_q = "\x00TRANSCRIPT\x00", "\x00QUESTION\x00"
        content = ("Here is the transcript of a recording, one line per segment, with the time "
                   "each segment starts at [m:ss]:\n\n" + marker_t + "\n\nAnswer the question "
                   "about the recording briefly, using only the transcript.\nQuestion: "
                   + marker_q)
        env = Environment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        rendered = env.from_string(self.chat_template).render(
            messages=[{"role": "user", "content": content}], add_generation_prompt=True,
            bos_token="", eos_token="")
        head, _, rest = rendered.partition(marker_t)
        mid, _, tail = rest.partition(marker_q)
        return [(head, False), (transcript, True), (mid, False), (q, True), (tail, False)]

    def encode(self, pieces: list[tuple[str, bool]]) -> list[int]:
        """Token ids of the pieces, each encoded on its own (user text literally).

        With ``join_space`` a space that ends a piece is moved to the start of the next one,
        so that ``"Question: " + "Who"`` is encoded ``"▁Who"`` as one text would be. Measured
        on the question set it scores *worse* (qa 11/26 against 14/26, and lower in four of the
        five styles) than leaving the space as its own token, so it is off by default.
        """
        ids = [] if self.codec.bos is None else [self.codec.bos]
        carry = ""
        for i, (text, literal) in enumerate(pieces):
            text = carry + text
            carry = ""
            if (self.join_space and i + 1 < len(pieces) and text.endswith(" ")
                    and not text.endswith("  ")):
                text, carry = text[:-1], " "
            ids += self.codec.text(text) if literal else self.codec.markup(text)
        if carry:
            ids += self.codec.markup(carry)
        return ids

    # -- planning -------------------------------------------------------------------------------
    def plan(self, spans: Sequence[Span], question: str, budget: int,
             window_tokens: int = 96) -> PromptPlan:
        """A prompt of at most ``budget`` tokens: the whole transcript if it fits, else the
        passages most related to the question (and a note saying so)."""
        stops = set(self.eos_ids)
        one_line = self.style != "instruct"
        if one_line:
            stops |= self.codec.newline_ids()
        timed = self.timed(question)
        pieces = self.render(_lines(spans, timed), question, timed)
        ids = self.encode(pieces)
        line_tokens = [len(self.codec.text(("\n" if i else "") + _lines([s], timed)))
                       for i, s in enumerate(spans)]
        transcript_tokens = sum(line_tokens)
        if len(ids) <= budget or not spans:
            return PromptPlan(ids, "".join(p for p, _ in pieces), list(spans), False, None,
                              transcript_tokens, self.style, timed, frozenset(stops), one_line)
        frame = len(self.encode(self.render("", question, timed)))
        room = budget - frame - 8  # a little slack: joins tokenize a bit differently
        if room < 16:
            raise ValueError(f"the question and the prompt's examples leave no room for the "
                             f"transcript in {budget} tokens of context")
        keep, how = select_spans(spans, line_tokens, question, room, window_tokens)
        while True:
            chosen = [spans[i] for i in keep]
            gaps = [(j == 0 and keep[0] != 0) or (j > 0 and keep[j] != keep[j - 1] + 1)
                    for j in range(len(keep))]
            text = _lines(chosen, timed, gaps)
            if keep[-1] != len(spans) - 1:
                text += "\n[...]"
            pieces = self.render(text, question, timed)
            ids = self.encode(pieces)
            if len(ids) <= budget or len(keep) == 1:
                break
            keep = _drop_lowest(keep, spans, question)
        if len(ids) > budget:
            raise ValueError(f"no transcript passage fits the {budget}-token context")
        note = (f"the transcript ({transcript_tokens} tokens, {format_time(spans[-1].end)}) does "
                f"not fit the answering model's context ({budget} tokens for the prompt): "
                f"answering from {len(keep)} of {len(spans)} segments {how} "
                f"({_ranges(chosen)})")
        return PromptPlan(ids, "".join(p for p, _ in pieces), chosen, True, note,
                          transcript_tokens, self.style, timed, frozenset(stops), one_line)


def _raise(message: str):
    raise ValueError(message)


def _ranges(spans: Sequence[Span], limit: int = 6) -> str:
    """``0:12–1:40, 23:05–24:10`` for runs of consecutive chosen spans."""
    runs: list[list[float]] = []
    for s in spans:
        if runs and s.start - runs[-1][1] < 0.5:
            runs[-1][1] = s.end
        else:
            runs.append([s.start, s.end])
    text = ", ".join(f"{format_time(a)}–{format_time(b)}" for a, b in runs[:limit])
    return text + (f", … ({len(runs) - limit} more)" if len(runs) > limit else "")


# ---------------------------------------------------------------------------------------------
# passage selection for transcripts longer than the context
# ---------------------------------------------------------------------------------------------

_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will
with would you your yours say says said speaker recording audio transcript mention mentioned
tell told talk talking
""".split())

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def content_words(text: str) -> list[str]:
    """Lower-cased words without stop words, lightly stemmed (plural and -ing/-ed endings), so
    that "fetched" in a question meets "fetch" in the transcript."""
    out = []
    for w in _WORD.findall(text.lower()):
        w = w.split("'")[0]
        if w in _STOPWORDS or not w:
            continue
        out.append(_stem(w))
    return out


def _stem(w: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def select_spans(spans: Sequence[Span], line_tokens: Sequence[int], question: str, room: int,
                 window_tokens: int = 96) -> tuple[list[int], str]:
    """Indices of the spans to keep (in time order) within ``room`` tokens, and how they were
    chosen.

    The transcript is cut into windows of consecutive spans (about ``window_tokens`` each),
    scored with BM25 against the question's content words; the best windows are taken until
    the room is full. Without any shared word the windows are spread evenly over the recording
    (a sample, not the start only).
    """
    windows: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, n in enumerate(line_tokens):
        if cur and size + n > window_tokens:
            windows.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += n
    if cur:
        windows.append(cur)
    docs = [Counter(w for i in win for w in content_words(spans[i].text)) for win in windows]
    q = set(content_words(question))
    scores = bm25(docs, q)
    if max(scores, default=0.0) > 0:
        order = sorted(range(len(windows)), key=lambda w: (-scores[w], w))
        how = "that share the most words with the question"
    else:
        order = _spread(len(windows))
        how = ("spread evenly over the recording (no passage shares a word with the "
               "question)")
    keep: list[int] = []
    used = 0
    for w in order:
        cost = sum(line_tokens[i] for i in windows[w]) + 4  # a "[...]" line
        if used + cost > room:
            if not keep and scores and (max(scores) > 0):
                # Even the best window is too big: keep its best spans.
                keep = _best_spans(windows[w], spans, line_tokens, q, room)
                used = room
            continue
        keep.extend(windows[w])
        used += cost
    if not keep:
        keep = _best_spans(windows[order[0]], spans, line_tokens, q, room)
    return sorted(keep), how


def _best_spans(window: list[int], spans, line_tokens, q: set, room: int) -> list[int]:
    ranked = sorted(window, key=lambda i: (-len(q & set(content_words(spans[i].text))), i))
    keep, used = [], 0
    for i in ranked:
        if used + line_tokens[i] + 4 <= room:
            keep.append(i)
            used += line_tokens[i] + 4
    return keep or ranked[:1]


def _spread(n: int) -> list[int]:
    """0..n-1 in an order that covers the range evenly early (bisection order)."""
    order, seen = [], set()
    step = n
    while len(order) < n:
        for i in range(0, n, max(1, step)):
            if i not in seen:
                seen.add(i)
                order.append(i)
        if step == 1:
            break
        step = max(1, step // 2)
    return order


def _drop_lowest(keep: list[int], spans: Sequence[Span], question: str) -> list[int]:
    q = set(content_words(question))
    worst = min(keep, key=lambda i: (len(q & set(content_words(spans[i].text))), -i))
    return [i for i in keep if i != worst]


def bm25(docs: list[Counter], query: set[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each document (a word Counter) for a set of query words."""
    if not docs or not query:
        return [0.0] * len(docs)
    n = len(docs)
    avg = sum(sum(d.values()) for d in docs) / n or 1.0
    df = {w: sum(1 for d in docs if w in d) for w in query}
    out = []
    for d in docs:
        length = sum(d.values())
        s = 0.0
        for w in query:
            tf = d.get(w, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
            s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avg))
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------------
# candidate sources: n-gram lookup
# ---------------------------------------------------------------------------------------------

class Lookup:
    """One candidate source: its token ids, indexed by every n-gram (n ≤ ``max_ngram``).

    :meth:`match` finds the longest suffix of the text so far that occurs in the source and
    returns where its continuation starts. Among several occurrences the one that continues
    the previous accepted copy wins (the answer is usually one contiguous quote), else the
    first.
    """

    def __init__(self, name: str, ids: Sequence[int], max_ngram: int = 4) -> None:
        self.name = name
        self.ids = list(ids)
        self.max_ngram = max_ngram
        self.index: dict[tuple[int, ...], list[int]] = {}
        for n in range(1, max_ngram + 1):
            for end in range(n, len(self.ids)):  # a match at the very end has no continuation
                self.index.setdefault(tuple(self.ids[end - n:end]), []).append(end)
        self.cursor: int | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def match(self, context: Sequence[int], min_ngram: int = 1) -> tuple[int, int]:
        """``(n, position)`` of the longest match (``(0, -1)`` without one)."""
        for n in range(min(self.max_ngram, len(context)), min_ngram - 1, -1):
            ends = self.index.get(tuple(context[-n:]))
            if ends:
                pos = self.cursor if self.cursor in ends else ends[0]
                return n, pos
        return 0, -1

    def advance(self, pos: int, accepted: int, own: int | None) -> None:
        """Remember where the copy stands after a pass that started at ``pos``."""
        end = pos + accepted
        if own is not None and end < len(self.ids) and self.ids[end] == own:
            end += 1
        self.cursor = end


class CandidateSources:
    """The answer's candidate sources, searched together (longest match wins; on a tie, the
    order given: transcript, drafter, question)."""

    def __init__(self, sources: Sequence[Lookup], min_ngram: int = 1) -> None:
        self.sources = [s for s in sources if len(s)]
        self.min_ngram = min_ngram

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sources)

    def best(self, context: Sequence[int]) -> tuple[Lookup | None, int, int]:
        best: tuple[Lookup | None, int, int] = (None, 0, -1)
        for src in self.sources:
            n, pos = src.match(context, self.min_ngram)
            if n > best[1]:
                best = (src, n, pos)
        return best


# ---------------------------------------------------------------------------------------------
# lossless speculative generation
# ---------------------------------------------------------------------------------------------

@dataclass
class Generation:
    tokens: list[int]  # committed tokens, the stop token included when there was one
    stopped: str  # "stop", "length" or "context"
    prefill_seconds: float
    seconds: float  # after the prefill
    passes: int


class SpeculativeGenerator:
    """Greedy generation with verified candidates: the LLM twin of ``WindowDecoder``.

    Each pass runs ``[pending] + candidates`` after the cached tokens, takes the greedy token
    of every row, keeps the longest run of candidates equal to those tokens plus the model's
    own next token, and truncates the rejected rows from the cache. With no candidates a pass
    is a plain greedy step, so ``candidates=None`` is target-only generation through the same
    code. The stop rule (a stop id ends the answer, the stop id included) is applied to
    committed tokens in order, exactly as plain generation applies it.
    """

    def __init__(self, model: LanguageModel, listener: Listener | None = None,
                 k_max: int = 16, prior_slope: float = 0.1,
                 prior_acceptance: dict[int, float] | None = None) -> None:
        self.model = model
        self.emit = listener or ignore
        self.k_max = k_max
        self.prior_slope = prior_slope
        self.prior_acceptance = dict(prior_acceptance or PRIOR_ACCEPTANCE)

    def _budget(self, budgets: dict, name: str, n: int) -> Budget:
        """The budget of one (source, match length) pair: a candidate found by a one-token
        match is a much weaker guess than one found by a four-token match, so each learns its
        own acceptance (from the prior measured on the benchmark)."""
        bucket = min(max(n, 1), max(self.prior_acceptance))
        key = (name, bucket)
        if key not in budgets:
            b = budgets[key] = Budget(k_max=self.k_max, prior_slope=self.prior_slope,
                                      prior_acceptance=self.prior_acceptance[bucket])
            b.window_start()
        return budgets[key]

    def generate(self, prompt_ids: Sequence[int], max_new: int, stop_ids: Iterable[int],
                 candidates: CandidateSources | None = None) -> Generation:
        model = self.model
        decode = model.tokenizer.decode
        stops = frozenset(int(i) for i in stop_ids)
        budgets: dict[tuple[str, int], Budget] = {}
        state = model.state()
        try:
            t0 = time.perf_counter()
            logits = model.prefill(state, list(prompt_ids))
            out = [int(np.argmax(logits))]
            prefill_s = time.perf_counter() - t0
            self.emit(Prefilled(len(prompt_ids), prefill_s, decode(out)))
            context = list(prompt_ids) + out
            seconds, passes = 0.0, 0
            stopped = self._stop_reason(out, stops, max_new, state)
            while stopped is None:
                t0 = time.perf_counter()
                room = min(max_new - len(out) - 1, state.capacity - state.length - 1)
                src, n, pos, cands = None, 0, -1, []
                if candidates is not None and room > 0:
                    src, n, pos = candidates.best(context)
                    if src is not None:
                        budget = self._budget(budgets, src.name, n)
                        k = budget.choose(min(len(src) - pos, room))
                        cands = src.ids[pos:pos + k]
                        if not cands:
                            src = None
                base = state.length
                rows = state.forward([out[-1]] + cands)
                committed: list[int] = []
                accepted = 0
                for i, row in enumerate(rows):
                    token = int(np.argmax(row))
                    committed.append(token)
                    if token in stops:
                        break
                    if i < len(cands) and token == cands[i]:
                        accepted += 1
                        continue
                    break
                state.truncate(base + 1 + accepted)
                out.extend(committed)
                context.extend(committed)
                dt = time.perf_counter() - t0
                seconds += dt
                passes += 1
                if src is not None:
                    own = committed[accepted] if accepted < len(committed) else None
                    src.advance(pos, accepted, own)
                    budget.record(len(cands), accepted, 1 + len(cands), dt)
                else:
                    for b in budgets.values():  # a plain step still measures pass cost
                        b.record(0, 0, 1, dt)
                self.emit(AnswerStep(len(cands), accepted, src.name if src else None,
                                     tuple(committed), decode(committed[:accepted]),
                                     decode(committed[accepted:]), decode(cands[accepted:]),
                                     dt, n))
                stopped = self._stop_reason(out, stops, max_new, state)
            return Generation(out, stopped, prefill_s, seconds, passes)
        finally:
            model.release(state)

    @staticmethod
    def _stop_reason(out: list[int], stops: frozenset[int], max_new: int, state) -> str | None:
        if out[-1] in stops:
            return "stop"
        if len(out) >= max_new:
            return "length"
        if state.length >= state.capacity:
            return "context"
        return None


def greedy_reference(model: LanguageModel, prompt_ids: Sequence[int], max_new: int,
                     stop_ids: Iterable[int]) -> list[int]:
    """Plain greedy generation, one token per pass, written independently of the generator
    (the reference that the speculative answer must equal, token for token)."""
    stops = set(stop_ids)
    state = model.state()
    try:
        logits = model.prefill(state, list(prompt_ids))
        out: list[int] = []
        while True:
            token = int(np.argmax(logits))
            out.append(token)
            if token in stops or len(out) >= max_new or state.length >= state.capacity:
                return out
            logits = state.forward([token])[-1]
    finally:
        model.release(state)


# ---------------------------------------------------------------------------------------------
# the answering stage
# ---------------------------------------------------------------------------------------------

@dataclass
class AskOptions:
    max_tokens: int = DEFAULT_MAX_TOKENS
    candidates: bool = True  # False: target-only generation (for comparison)
    style: str | None = None  # None: "instruct" for chat models, else DEFAULT_STYLE
    context_tokens: int | None = None  # prompt + answer limit (None: the model's capacity)
    max_ngram: int = 4
    min_ngram: int = 1
    k_max: int = 16
    sources: tuple[str, ...] = SOURCES


@dataclass
class Answer:
    question: str
    text: str
    tokens: list[int]
    evidence: list[Span]  # transcript spans the answer draws on
    context: list[Span]  # transcript spans the prompt held
    selected: bool
    note: str | None
    stopped: str
    stats: AnswerStats
    prompt: PromptPlan = field(repr=False, default=None)

    def to_dict(self) -> dict:
        return {"question": self.question, "answer": self.text,
                "spans": [s.to_dict() for s in self.evidence],
                "context": {"selected": self.selected, "note": self.note,
                            "spans": [s.to_dict() for s in self.context]},
                "stopped": self.stopped}


class Answerer:
    """Answers questions about a transcript with one answering model."""

    def __init__(self, model: LanguageModel, listener: Listener | None = None,
                 options: AskOptions | None = None) -> None:
        self.model = model
        self.options = options or AskOptions()
        self.emit = listener or ignore
        self.codec = Codec(model.tokenizer)
        template = getattr(model, "chat_template", None)
        style = self.options.style or ("instruct" if template else DEFAULT_STYLE)
        self.builder = PromptBuilder(self.codec, style, template, model.stop_ids)
        # A graph whose rows are not computed independently cannot verify losslessly.
        self.lossless = bool(getattr(model, "row_invariant", True))

    @property
    def capacity(self) -> int:
        cap = self.model.capacity
        if self.options.context_tokens:
            cap = min(cap, int(self.options.context_tokens))
        return cap

    def prompt(self, spans: Sequence[Span], question: str) -> PromptPlan:
        budget = self.capacity - self.options.max_tokens
        if budget < 64:
            raise ValueError(f"--max-tokens {self.options.max_tokens} leaves no room for the "
                             f"prompt in the model's {self.capacity}-token context")
        return self.builder.plan(spans, question, budget)

    def sources(self, spans: Sequence[Span], question: str, drafter_text: str | None,
                plan: PromptPlan) -> CandidateSources:
        """The candidate sources of one answer, tokenized as the prompt writes them.

        The transcript source is the *whole* transcript (also when the prompt holds only
        selected passages) in the prompt's line format, so that a copied line end proposes the
        line break that ends a one-line answer; ``examples`` are the prompt's few-shot blocks
        (they predict the answer's form: "At 0:0…", the full stop, the line break).
        """
        o = self.options
        texts = {"transcript": _lines(spans, plan.timed),
                 "drafter": " " + " ".join(drafter_text.split()) if drafter_text else "",
                 "question": " " + " ".join(question.split()),
                 "examples": self.builder.examples_text(plan.timed)}
        return CandidateSources([Lookup(name, self.codec.text(texts[name]), o.max_ngram)
                                 for name in SOURCES if name in o.sources and texts[name].strip()],
                                o.min_ngram)

    def ask(self, spans: Sequence[Span], question: str, drafter_text: str | None = None) -> Answer:
        if not question.strip():
            raise ValueError("the question is empty")
        o = self.options
        collector = AnswerStatsCollector()
        emit = fanout(collector, self.emit)
        plan = self.prompt(spans, question)
        if plan.note:
            emit(Note(plan.note, "warning"))
        use = o.candidates and self.lossless
        if o.candidates and not self.lossless:
            emit(Note(f"{self.model.name}: its graph does not compute each token independently "
                      "of the others in a pass, so verified candidates could change the answer; "
                      "generating without candidates", "warning"))
        sources = self.sources(spans, question, drafter_text, plan) if use else None
        emit(AskStarted(question, self.model.name, len(plan.ids), plan.transcript_tokens,
                        len(spans), len(plan.spans), plan.selected, use,
                        sources.names if sources else ()))
        gen = SpeculativeGenerator(self.model, emit, k_max=o.k_max)
        result = gen.generate(plan.ids, o.max_tokens, plan.stop_ids, sources)
        text = self.answer_text(result.tokens, plan)
        emit(AnswerDone(text, len(result.tokens), result.stopped,
                        result.prefill_seconds + result.seconds))
        return Answer(question, text, result.tokens, evidence(text, plan.spans), plan.spans,
                      plan.selected, plan.note, result.stopped, collector.current, plan)

    def answer_text(self, tokens: Sequence[int], plan: PromptPlan) -> str:
        ids = [t for t in tokens if t not in self.builder.eos_ids]
        text = self.codec.decode(ids)
        if plan.one_line:
            text = text.split("\n", 1)[0]
        return text.strip()


_TIME = re.compile(r"\b(?:(\d+):)?(\d{1,2}):(\d{2})\b")


def parse_times(text: str) -> list[float]:
    """Times written ``m:ss`` or ``h:mm:ss`` in ``text``, in seconds."""
    out = []
    for h, m, s in _TIME.findall(text):
        out.append(int(h or 0) * 3600 + int(m) * 60 + int(s))
    return out


def evidence(answer: str, spans: Sequence[Span]) -> list[Span]:
    """The transcript spans an answer draws on: the span at a time it names, else the spans
    sharing the most of its content words (none when it shares none)."""
    times = parse_times(answer)
    if times:
        hits = [s for s in spans for t in times if format_time(s.start) == format_time(t)
                or s.start - 0.5 <= t <= s.end]
        if hits:
            return list(dict.fromkeys(hits))
    words = set(content_words(answer))
    if not words:
        return []
    scored = [(len(words & set(content_words(s.text))), s) for s in spans]
    best = max((n for n, _ in scored), default=0)
    return [s for n, s in scored if n == best] if best else []


def drafter_text(strategy, whisper) -> str | None:
    """The AS²D drafter's transcript of the last decode (its candidate stream, in the target
    Whisper's token ids), as text; None when the strategy had no drafter."""
    stream = getattr(strategy, "stream", None)
    tokens = list(getattr(stream, "tokens", None) or ())
    if not tokens:
        return None
    text = whisper.tokenizer.decode(tokens)
    return " ".join(text.split()) or None
