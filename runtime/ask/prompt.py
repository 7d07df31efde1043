"""The answering model's prompt: its styles, few-shot examples and fitting into the context.

The default answering model (Gemma 3 270M) is a *base* model: it follows examples, not
instructions. The prompt is therefore few-shot: three invented transcripts, each followed by
several questions with short answers copied from it (which also makes answers good to copy).
Times (``[m:ss]`` at the start of each line) are shown only when the question is about the
recording's clock (:func:`asks_about_time`); "when" about the content is answered from the
words. On the ``dev`` split of ``bench/ask_questions.json`` (``scripts/ask_bench.py``) the
examples with content-when, number and quote questions, the clock-only times, the located
recording times and the transcript check took qa from 12/31 to 21/31 (test: 10/28 to 15/28);
``qa-focus`` (the most related line repeated after the question) scored 15/31 on dev, so it is
not the default. Earlier, on the 26 questions of the time: 14/26 for qa against 12/26 with
times on every line, 12/26 without times, 12/26 with one question per example and 11/26 inside
Gemma's chat markup. Instruction-tuned ``--llm`` models with a chat template get one plain
instruction instead (style ``instruct``).

A transcript longer than the model's context is never cut silently: the passages that share
the most words with the question are selected (:mod:`as2d.runtime.ask.passages`), kept in time
order with ``[...]`` where text was left out, and the plan says so (:class:`PromptPlan`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from as2d.runtime.ask.codec import Codec
from as2d.runtime.ask.passages import drop_lowest, focus, select_spans
from as2d.runtime.ask.spans import Span, format_time, time_ranges, transcript_lines
from as2d.runtime.llm.template import TemplateError, render_chat_template

# Invented examples (nothing from the benchmark clips). Each transcript is followed by several
# questions, as a user would ask them: who/what/where/how, numbers, quotes and "when" about the
# content answered by a short span of the transcript; "when" about the recording's clock
# answered by the time of the line that holds the words. A timed prompt shows the recording-time
# questions, an untimed one the others (see PromptBuilder).
_EXAMPLES: tuple[tuple[tuple[tuple[float, str], ...], tuple[tuple[str, str], ...]], ...] = (
    (((0.0, "Good morning, this is Captain Harris speaking from the flight deck."),
      (4.2, "We will be landing in Lisbon in about forty minutes."),
      (8.5, "The weather there is sunny, with a temperature of twenty-two degrees.")),
     (("Who is speaking from the flight deck?", "Captain Harris."),
      ("Where will we be landing?", "In Lisbon."),
      ("When will we be landing?", "In about forty minutes."),
      ("How warm is it there?", "Twenty-two degrees."),
      ("When does the captain mention the weather?", "At 0:08."))),
    (((0.0, "Mary planted the roses by the garden wall."),
      (3.1, "Her brother Tom painted the old fence blue."),
      (7.4, "In the evening they sat together under the apple tree."),
      (11.0, "It was the best summer of their lives, and the last one.")),
     (("What colour did Tom paint the fence?", "Blue."),
      ("Mary planted the roses, and what did Tom do?", "He painted the old fence blue."),
      ("When did they sit under the apple tree?", "In the evening."),
      ("When does the speaker talk about the apple tree?", "At 0:07."),
      ("What was it the best of?", "Summer."))),
    (((0.0, "Are you ready?"),
      (1.2, "No."),
      (2.0, "Then hurry up, we are late."),
      (4.5, "We walk slowly because the road is icy.")),
     (("What is the reply to 'Are you ready?'", "No."),
      ("What does the speaker say after 'No'?", "Then hurry up, we are late."),
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
    "qa-focus": "qa, and after the question the transcript line that shares most words with it "
                "(and the line after it), as every example shows it too",
    "chat": "qa inside Gemma's <start_of_turn> markup",
    "instruct": "one instruction with the transcript and the question, in the model's chat "
                "template (for instruction-tuned --llm models); times as in qa",
}
DEFAULT_STYLE = "qa"

_INTRO = ("Each transcript below is followed by questions about it and short answers taken "
          "from the transcript.\n\n")
# A question about the recording's clock: it names the recording (its point, minute, second,
# timestamp), or asks when a *speech act* happens ("when does the speaker say / mention / ask
# ..."). Any other "when" is about the content ("When does the market open?") and is answered
# from the words, like who/what questions.
_RECORDING = r"(?:recording|audio|clip|file|tape|track|video|podcast)"
# What a recording may be, in "at what point in the announcement ...".
_FORMS = (r"(?:announcement|message|voicemail|report|lecture|broadcast|interview|talk|speech|"
          r"news|programme|program|episode|reading|conversation|call)")
# Verbs of speaking that place a moment in the recording whoever is their subject ("When does
# she mention the famine?") ...
_SPEECH_ACT = (r"(?:say|says|said|saying|mention|mentions|mentioned|read|reads|quote|quotes|"
               r"bring up|brings up|refer|refers|describe|describes|discuss|discusses|"
               r"introduce|introduces)")
# ... and verbs that do so only with the speaker as their subject ("When does the speaker
# start talking?"), not of what is told ("When does the concert start?", "When did they
# talk?", "When was the baby named?").
_SPEAKER_ACT = (r"(?:ask|asks|asked|talk|talks|talked|talking|speak|speaks|spoke|speaking|call|"
                r"calls|called|sing|sings|sang|tell|tells|told|name|names|named|answer|answers|"
                r"reply|replies|replied|start|starts|begin|begins|end|ends|finish|finishes|"
                r"stop|stops)")
# ... and then only as talking itself: with nothing after the verb, talking after it or what
# it is about ("When does the speaker start talking?", "When does the speaker talk about the
# tree?"; not "When did the speaker start his business?").
_ACT_END = r"(?:\W*$|\s+(?:talking|speaking|reading|to\s+(?:talk|speak|read)|about)\b)"
# Verbs that quote words ("When does someone answer 'Not now'?"; not "sing 'Happy Birthday'").
_QUOTING = (r"(?:say|says|said|answer|answers|answered|reply|replies|replied|ask|asks|asked|"
            r"shout|shouts|shouted|call|calls|called)")
_SPEAKER = (r"(?:the\s+)?(?:speaker|narrator|reader|announcer|host|presenter|caller|lecturer|"
            r"voice|recording|audio|clip|singer|interviewer)")
_CLOCK = re.compile(
    r"\b(?:timestamp|time ?code|time stamp|how far into|how many (?:minutes|seconds) into|"
    r"(?:at|in|on) what (?:point|minute|second|moment|part)\b[^?]*\b(?:" + _RECORDING + "|"
    + _FORMS + "|" + _SPEECH_ACT + "|" + _SPEAKER_ACT + r")\b"
    r"|(?:at|in|on) what time\b[^?]*\b(?:" + _RECORDING + "|" + _SPEECH_ACT + r")\b"
    r"|(?:at|in|on) what time\b[^?]*\b" + _SPEAKER + r"\s+(?:\w+\s+){0,2}?" + _SPEAKER_ACT
    + _ACT_END
    + r"|(?:at|in) which (?:minute|second|point|moment|part)|at what (?:minute|second)"
    r"|what (?:minute|second|point) (?:of|in) the " + _RECORDING
    + r"|when (?:\w+ ){0,4}?(?:is|was|are|were|does|did|do)\s+(?:\w+\s+){0,3}?(?:first |last |"
    r"again |)" + _SPEECH_ACT + r"\b"
    r"|when (?:is|was|are|were|does|did|do)\s+" + _SPEAKER + r"\s+(?:\w+\s+){0,2}?"
    + _SPEAKER_ACT + _ACT_END
    + r"|when (?:\w+ ){0,4}?(?:is|was|are|were|does|did|do)\s+(?:\w+\s+){0,3}?" + _QUOTING
    + r"\s+['\"\u2018\u201c]"  # quoted words: "When does someone answer 'Not now'?"
    r"|when (?:\w+ ){0,4}?(?:is|was|are|were) (?:first |last |)(?:" + _SPEECH_ACT
    + r"|heard|asked)\b)", re.I)


# The words of a question that name the recording's clock, not what was said then.
_CLOCK_WORDS = re.compile(r"\b(?:timestamps?|time ?codes?|time stamps?|how far into|"
                          r"how many (?:minutes|seconds) into|(?:what|which) (?:point|minute|"
                          r"second|moment|time|part)s?|(?:in|of|into) the (?:" + _RECORDING
                          + "|" + _FORMS + r"))\b", re.I)


def without_clock(question: str) -> str:
    """The question without the words that ask for the clock ("At what *time* does the reader
    speak of a famine?" → the famine): the words to find in the transcript."""
    return _CLOCK_WORDS.sub(" ", question)


def asks_about_time(question: str) -> bool:
    """Whether a question is about the *recording's clock* (when something is said in it), so
    times belong in the prompt and the answer is a time; "when" about the content is not."""
    return bool(_CLOCK.search(" ".join(question.split())))


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
    focus: list[Span] = field(default_factory=list)  # the spans most related to the question
    # Leading ids that depend on neither the transcript nor the question (the few-shot head):
    # the same in every prompt of a style, so their KV rows can be kept between runs
    # (:mod:`as2d.runtime.llm.prefix_cache`).
    static: int = 0
    # Ids before the question's part (head and transcript): a prompt that asks another
    # question shares them (the neutral prompt of candidate calibration, :meth:`suffix`).
    question_at: int = 0


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
        self._frame: str | None = None  # the rendered chat template, with markers
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.join_space = join_space
        self.focused = style == "qa-focus"

    def timed(self, question: str) -> bool:
        if self.style == "qa-timed":
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
            spans = _example_spans(lines)
            out.append(f"Transcript:\n{text}\n"
                       + "".join(f"Question: {q}\n{self._focus_line(spans, q)}Answer: {a}\n"
                                 for q, a in qas) + "\n")
        return "".join(out)

    def _focus_line(self, spans: Sequence[Span], question: str) -> str:
        if not self.focused:
            return ""
        text = " ".join(spans[i].text.strip() for i in focus(spans, question))
        return f"Line: {text}\n" if text else ""

    def render(self, transcript: str, question: str, timed: bool,
               focus_text: str = "") -> list[tuple[str, bool]]:
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
        if self.focused and focus_text:
            pieces += [("\nLine: ", False), (focus_text, True)]
        if self.style == "chat":
            pieces.append(("<end_of_turn>\n<start_of_turn>model\nAnswer:", False))
        else:
            pieces.append(("\nAnswer:", False))
        return pieces

    def _render_instruct(self, transcript: str, q: str) -> list[tuple[str, bool]]:
        marker_t, marker_q = "\x00TRANSCRIPT\x00", "\x00QUESTION\x00"
        # Measured with SmolLM2-135M-Instruct on the dev split of the question set: 3/31
        # with times on every line and the instruction before the question, 6/31 with this
        # (times only for questions about the clock, as in qa; the instruction last).
        content = ("Transcript of a recording:\n\n" + marker_t + "\n\nQuestion: " + marker_q
                   + "\nAnswer the question in a few words, using only the transcript.")
        # The template comes from the model's folder: untrusted code, rendered in a bounded
        # sandbox (as2d.runtime.llm.template); it does not depend on the texts, so once.
        # enable_thinking=False: a template with a reasoning mode (Qwen3) answers at once
        # instead of spending the answer's tokens on a <think> block; others ignore it.
        if self._frame is None:
            self._frame = render_chat_template(
                self.chat_template, messages=[{"role": "user", "content": content}],
                add_generation_prompt=True, bos_token="", eos_token="", enable_thinking=False)
        rendered = self._frame
        if marker_t not in rendered or marker_q not in rendered:
            raise TemplateError("the chat template does not show the user's message")
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
        return self._encode(pieces)[0]

    def _encode(self, pieces: list[tuple[str, bool]], bos: bool = True
                ) -> tuple[list[int], list[int]]:
        """:meth:`encode`, and after each piece the number of ids so far (a piece's ids never
        change with the pieces after it, so each count ends a prefix of the final ids)."""
        ids = [] if self.codec.bos is None or not bos else [self.codec.bos]
        ends = []
        carry = ""
        for i, (text, literal) in enumerate(pieces):
            text = carry + text
            carry = ""
            if (self.join_space and i + 1 < len(pieces) and text.endswith(" ")
                    and not text.endswith("  ")):
                text, carry = text[:-1], " "
            ids += self.codec.text(text) if literal else self.codec.markup(text)
            ends.append(len(ids))
        if carry:
            ids += self.codec.markup(carry)
        return ids, ends

    def _static(self, ends: list[int]) -> int:
        """How many leading ids :meth:`render`'s fixed pieces hold (the chat style opens its
        turn before the head; every style's head comes before the transcript)."""
        fixed = self._transcript_piece()
        return ends[fixed - 1] if len(ends) > fixed else 0

    def _transcript_piece(self) -> int:
        return 2 if self.style == "chat" else 1

    def head(self, question: str) -> list[int]:
        """The fixed ids a prompt asking ``question`` starts with (``plan.ids[:plan.static]``
        of any transcript)."""
        pieces = self.render("", question, self.timed(question))
        return self._encode(pieces[:self._transcript_piece()])[0]

    def suffix(self, question: str, timed: bool) -> list[int]:
        """The ids that follow the transcript in a prompt asking ``question``: with
        ``plan.ids[:plan.question_at]`` they are that prompt's ids exactly (each piece is
        encoded on its own)."""
        pieces = self.render("", question, timed)
        return self._encode(pieces[self._transcript_piece() + 1:], bos=False)[0]

    # -- planning -------------------------------------------------------------------------------
    def plan(self, spans: Sequence[Span], question: str, budget: int,
             window_tokens: int = 96, passage_tokens: int | None = None,
             whole_tokens: int | None = None) -> PromptPlan:
        """A prompt of at most ``budget`` tokens: the whole transcript if it fits (in
        ``whole_tokens`` of transcript, when given; default ``passage_tokens``), else the
        passages most related to the question, in at most ``passage_tokens`` (and a note
        saying so)."""
        whole = passage_tokens if whole_tokens is None else whole_tokens
        stops = set(self.eos_ids)
        one_line = self.style != "instruct"
        if one_line:
            stops |= self.codec.newline_ids()
        timed = self.timed(question)
        near = [spans[i] for i in focus(spans, question)]
        focus_text = " ".join(s.text.strip() for s in near) if self.focused else ""
        pieces = self.render(transcript_lines(spans, timed), question, timed, focus_text)
        ids, ends = self._encode(pieces)
        line_tokens = [len(self.codec.text(("\n" if i else "") + transcript_lines([s], timed)))
                       for i, s in enumerate(spans)]
        transcript_tokens = sum(line_tokens)
        if (len(ids) <= budget and (whole is None or transcript_tokens <= whole)) or not spans:
            return PromptPlan(ids, "".join(p for p, _ in pieces), list(spans), False, None,
                              transcript_tokens, self.style, timed, frozenset(stops), one_line,
                              near, self._static(ends), ends[self._transcript_piece()])
        frame = len(self.encode(self.render("", question, timed, focus_text)))
        room = budget - frame - 8  # a little slack: joins tokenize a bit differently
        limit = f"the answering model's context ({budget} tokens for the prompt)"
        if passage_tokens is not None and passage_tokens < room:
            room, limit = passage_tokens, f"the {whole} tokens of transcript read whole"
        if room < 16:
            raise ValueError(f"the question and the prompt's examples leave no room for the "
                             f"transcript in {budget} tokens of context")
        keep, how = select_spans(spans, line_tokens, question, room, window_tokens)
        while True:
            chosen = [spans[i] for i in keep]
            gaps = [(j == 0 and keep[0] != 0) or (j > 0 and keep[j] != keep[j - 1] + 1)
                    for j in range(len(keep))]
            text = transcript_lines(chosen, timed, gaps)
            if keep[-1] != len(spans) - 1:
                text += "\n[...]"
            pieces = self.render(text, question, timed, focus_text)
            ids, ends = self._encode(pieces)
            if len(ids) <= budget or len(keep) == 1:
                break
            keep = drop_lowest(keep, spans, question)
        if len(ids) > budget:
            raise ValueError(f"no transcript passage fits the {budget}-token context")
        note = (f"the transcript ({transcript_tokens} tokens, {format_time(spans[-1].end)}) does "
                f"not fit {limit}: "
                f"answering from {len(keep)} of {len(spans)} segments {how} "
                f"({time_ranges(chosen)})")
        return PromptPlan(ids, "".join(p for p, _ in pieces), chosen, True, note,
                          transcript_tokens, self.style, timed, frozenset(stops), one_line, near,
                          self._static(ends), ends[self._transcript_piece()])


def _example_spans(lines: Sequence[tuple[float, str]]) -> list[Span]:
    return [Span(t, lines[i + 1][0] if i + 1 < len(lines) else t + 4.0, text)
            for i, (t, text) in enumerate(lines)]

