"""Audio question answering: a transcript, a question, and a lossless speculative answer.

``as2d ask`` first transcribes (AS²D, as ``transcribe`` does), then prompts the answering LLM
with the transcript and the question. The pieces, one module each:

* :mod:`~as2d.runtime.ask.spans` — the transcript as timed spans, and times in text;
* :mod:`~as2d.runtime.ask.prompt` — the prompt's styles and few-shot examples, fitted into the
  model's context (:mod:`~as2d.runtime.ask.passages` selects passages of a long transcript;
  :mod:`~as2d.runtime.ask.codec` keeps user text literal);
* :mod:`~as2d.runtime.ask.answer_sources` — the texts candidates are looked up in (transcript,
  drafter, question, examples);
* :mod:`~as2d.runtime.ask.generate` — generation by verified passes, token-identical to plain
  greedy generation.
* :mod:`~as2d.runtime.ask.policy` — the answer policy: the hand-written rules of one language
  (:mod:`~as2d.runtime.ask.english`: the kind of answer asked, candidate answers taken from the
  transcript and scored by the model under the same prompt, counts, yes/no readings), picked
  from the transcript's language once per answer; none for a language they were not written
  for (the model's own answer then).

This module puts them together: an :class:`Answerer` turns spans and a question into an
:class:`Answer` with its evidence, its context and its statistics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from as2d.runtime.ask.answer_events import AnswerDone, AnswerStats, AnswerStatsCollector, AskStarted
from as2d.runtime.ask.answer_sources import (
    PREVIOUS_ANSWERS,
    SOURCES,
    lookup_source,
    source_texts,
)
from as2d.runtime.ask.attribution import has_speakers, who_said
from as2d.runtime.ask.codec import Codec
from as2d.runtime.ask.evidence import Evidence
from as2d.runtime.ask.generate import LanguageModel, SpeculativeGenerator
from as2d.runtime.ask.judge import LIKELIHOOD_BELOW, judge
from as2d.runtime.ask.passages import evidence, rank_spans
from as2d.runtime.ask.policies import policy_for
from as2d.runtime.ask.policy import Candidate
from as2d.runtime.ask.prompt import DEFAULT_STYLE, PromptBuilder, PromptPlan, without_clock
from as2d.runtime.ask.question import question_error
from as2d.runtime.ask.rerank import question_likelihoods
from as2d.runtime.ask.spans import Span, format_time
from as2d.runtime.ask.tree import TreeSource
from as2d.runtime.ask.tree import score as tree_score
from as2d.runtime.events import Listener, Note, fanout, ignore
from as2d.runtime.llm.prefix_cache import for_model as prefix_cache_for
from as2d.runtime.option_errors import OptionError, check_whole
from as2d.runtime.speculative.lookup import LookupSource

DEFAULT_MAX_TOKENS = 48
# The question a candidate's prior likelihood is measured under: says nothing about what is
# asked, so what it favours (the first line, a short common phrase) is the model's bias.
NEUTRAL_QUESTION = "What is said?"



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
    # Look-ups match tokens whatever their case (proposing the source's own tokens).
    fold_case: bool = True
    # A question about the recording's clock ("when does the speaker say ...") is answered
    # with the time of the span that says it (found by shared and quoted words), not generated.
    locate: bool = True
    # "Who said X?" about a transcript whose spans know their speakers (a diarized
    # recording): answered with the speaker of the passage that says X
    # (:mod:`as2d.runtime.ask.attribution`), not generated.
    attribute: bool = True
    # Answers are held to the question's kind (who → a person, how many → a count, when → a
    # time, ...), must add to the question's words, and every content word must be said in
    # the transcript (:mod:`as2d.runtime.ask.english.kinds`); when none qualifies the answer
    # is "The recording does not say." (English transcripts: the answer policy's rules)
    check: bool = True
    # Candidate answers taken from the transcript are scored by the model under the same
    # prompt (:mod:`as2d.runtime.ask.english.extract`); see :meth:`Answerer.choose` for which answer
    # is given. "How many times ..." about a phrase found in the transcript is counted.
    extract: bool = True
    count: bool = True
    # When a scored transcript span answers, the model's own generated answer is not the
    # answer: it is generated only to compare (``as2d ask --json`` shows it as ``generated``;
    # the question-set bench measures generation on it). Otherwise the prefill, the scoring
    # and the calibration run, and nothing is generated.
    compare: bool = False
    # Candidates are ranked by their likelihood under the question minus ``calibrate`` times
    # their likelihood under a neutral question (:data:`NEUTRAL_QUESTION`), for the
    # ``calibrate_top`` likeliest; see :meth:`Answerer.calibrate`. 0 ranks by likelihood alone.
    calibrate: float = 0.75
    calibrate_top: int = 6
    # Every answer is judged (:mod:`as2d.runtime.ask.judge`): its evidence ordered, and
    # withheld when it is a span the model gives a log-likelihood below ``abstain_below`` as
    # the answer (``-inf``: none withheld for it), it is not of the kind asked, or a yes/no
    # question is not decided. ``judge`` False: the answer as found (the bench's "before").
    judge: bool = True
    # A transcript of up to ``whole_tokens`` tokens is read whole (every clip of the question
    # set, under a minute and 400 tokens, is); a longer one is answered from ``passage_tokens``
    # of its passages that share the most words with the question (retrieval over the whole
    # transcript, then the model on the best passages). On the dev questions asked of one
    # 10-minute recording of their clips (``scripts/ask_long.py --passage-tokens``;
    # bench/results/ask-long-dev-p256.json against ask-long-dev.json), 256 tokens of
    # passages put the answer in the first evidence passage for 61.6 % of the answerable
    # questions against 57.5 % with 768 (384: 59.6 %), at a higher precision (75.7 % against
    # 72.4 %); on the test split, scored once, 57.3 % against 53.4 % (precision 65.8 % against
    # 60.9 %: ask-long-test-p256.json, ask-long-test-p768.json). And a follow-up question
    # prefills about 200 tokens after the stored head instead of 750.
    whole_tokens: int = 768
    passage_tokens: int = 256
    abstain_below: float = LIKELIHOOD_BELOW
    # An answer withheld from selected passages of a long transcript shows first the passage
    # the model finds the question likeliest after, among BM25's best
    # (:func:`~as2d.runtime.ask.judge.passages`): one pass per passage.
    rerank: bool = True
    # The few-shot head's KV rows are stored beside the model and loaded by later runs
    # (:mod:`as2d.runtime.llm.prefix_cache`): 0.3 s less prefill, the same answer.
    prefix_cache: bool = True

    def __post_init__(self) -> None:
        """Checked once here for every face (``as2d ask``, ``as2d.ask``, the server): an
        :class:`OptionError` names the field (``--max-tokens`` on the command line). A
        ``max_tokens`` too large for the model's context is refused once the answerer knows
        the model (:class:`Answerer`)."""
        check_whole("max_tokens", self.max_tokens, 1)


@dataclass
class Answer:
    question: str
    text: str
    tokens: list[int]
    context: list[Span]  # transcript spans the prompt held
    selected: bool
    note: str | None
    stopped: str
    stats: AnswerStats
    prompt: PromptPlan = field(repr=False, default=None)
    # How the answer was found: "extracted" (the best-scored transcript span), "counted"
    # (how many times a phrase occurs), "read" (read off the order of the transcript's words:
    # the first digit, the number said twice, how many X are named), "confirmed" (a yes/no
    # question, yes or no from the clause that says it), "located" (a recording
    # time, from the span that says the words), "attributed" (who said the words: the
    # speaker of the span that says them), "not said" (no span qualified and the
    # generated answer was not of the kind asked or not said in the transcript) or
    # "generated" (the model's own answer)
    method: str = "generated"
    generated: str | None = None  # the model's own answer when it was replaced
    candidates: list[Candidate] = field(default_factory=list)  # scored, best first
    # The passages the answer rests on, best first (transcript spans are Evidence); when it
    # abstained, the passages that come closest.
    evidence: tuple[Evidence, ...] = ()
    # No answer cleared the bar: ``text`` says the recording does not say (``method``
    # "not said"), and ``evidence`` holds the closest passages, if any.
    abstained: bool = False
    # How the judge (:mod:`as2d.runtime.ask.judge`) saw it: the share of the question's words
    # said around the answer's passage, the answer it withheld or replaced (a yes/no question
    # answered from its deciding clause), and why it was withheld.
    confidence: float | None = None
    likelihood: float | None = None  # a chosen span's log-likelihood as the answer
    withheld: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        self.evidence = tuple(self.evidence)

    def to_dict(self) -> dict:
        return {"question": self.question, "answer": self.text, "method": self.method,
                "abstained": self.abstained,
                "evidence": [s.to_dict() for s in self.evidence],
                **({"generated": self.generated} if self.generated is not None else {}),
                **({"candidates": [c.to_dict(self.context) for c in self.candidates]}
                   if self.candidates else {}),
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
        template = model.chat_template
        style = self.options.style or ("instruct" if template else DEFAULT_STYLE)
        self.builder = PromptBuilder(self.codec, style, template, model.stop_ids)
        # A graph whose rows are not computed independently cannot verify losslessly.
        self.lossless = model.lossless
        # The prompt head's KV rows, kept between runs (None: every prefill is whole).
        self.prefix = prefix_cache_for(model) if self.options.prefix_cache else None
        self._folded: dict[int, str] = {}
        # The model's own earlier answers (token ids, most recent last): the ``previous``
        # candidate source (an instruction model frames its answers alike).
        self.previous: deque[list[int]] = deque(maxlen=PREVIOUS_ANSWERS)

    def warm(self, question: str) -> bool:
        """Read the stored KV rows of the prompt head ``question`` will be asked under, ahead
        of :meth:`ask` (``as2d ask`` does it beside the transcription); False when there are
        none to read."""
        if self.prefix is None:  # (only bundles keep a head, and they know their shape)
            return False
        config = self.model.config
        try:
            head = self.builder.head(question)
        except ValueError:  # a prompt that cannot be built: ask() says so, in its place
            return False
        return self.prefix.preload(head, config.num_layers, config.kv_dim)

    @property
    def capacity(self) -> int:
        cap = self.model.capacity
        if self.options.context_tokens:
            cap = min(cap, int(self.options.context_tokens))
        return cap

    def prompt(self, spans: Sequence[Span], question: str) -> PromptPlan:
        budget = self.capacity - self.options.max_tokens
        if budget < 64:
            raise OptionError("max_tokens", f"{self.options.max_tokens} leaves no room for the "
                              f"prompt in the model's {self.capacity}-token context")
        # a long transcript: the passages that share the most words with the question (BM25
        # over the whole of it), not everything the context holds
        return self.builder.plan(spans, question, budget,
                                 passage_tokens=self.options.passage_tokens,
                                 whole_tokens=self.options.whole_tokens)

    def sources(self, spans: Sequence[Span], question: str, drafter_text: str | None,
                plan: PromptPlan) -> LookupSource:
        """The candidate source of one answer, tokenized as the prompt writes its texts
        (``examples`` are the prompt's own few-shot blocks)."""
        o = self.options
        texts = source_texts(spans, question, drafter_text,
                             self.builder.examples_text(plan.timed), plan.timed)
        return lookup_source(texts, self.codec.text, o.sources, o.max_ngram, o.min_ngram,
                             o.k_max, self.fold if o.fold_case else None, plan.ids,
                             list(self.previous)[::-1])

    def fold(self, tid: int) -> str:
        """A token as look-ups match it: its text in lower case (an answer that copies "the age
        of wisdom" starts it " The")."""
        key = self._folded.get(tid)
        if key is None:
            piece = self.model.tokenizer.token(tid)
            key = self._folded[tid] = piece.lower() if piece is not None else f"#{tid}"
        return key

    def ask(self, spans: Sequence[Span], question: str, drafter_text: str | None = None,
            language: str | None = None, keep_rows: bool = True) -> Answer:
        """The answer to ``question`` about the transcript ``spans``, with its evidence (best
        first), withheld when it does not stand (:mod:`~as2d.runtime.ask.judge`).
        ``language`` (the transcript's, a Whisper code) picks the answer policy
        (:func:`~.policies.policy_for`): the English rules for English or an unknown language,
        none for another (the model's own answer, and the answer's note says the rules were
        off). ``keep_rows``: the KV rows of a transcript read whole are stored beside the model
        for the next question about it (:mod:`as2d.runtime.llm.prefix_cache`); False where no
        transcript may be kept: the rows are its words in another form."""
        problem = question_error(question)
        if problem:
            raise ValueError(problem)
        policy = policy_for(language)
        found = self.find(spans, question, drafter_text, policy, keep_rows)
        if not self.options.judge:
            return found
        rerank = None
        if self.options.rerank:
            def rerank(texts: list[str]) -> list[float]:
                return question_likelihoods(self.model, self.codec, texts, question)
        return judge(found, spans, question, policy, self.options.abstain_below, rerank)

    def find(self, spans: Sequence[Span], question: str, drafter_text: str | None,
             policy, keep_rows: bool = True) -> Answer:
        """The answer as the rules and the model find it, before it is judged."""
        o = self.options
        collector = AnswerStatsCollector()
        emit = fanout(collector, self.emit)
        if policy.note:
            emit(Note(policy.note, "info"))
        if o.attribute and has_speakers(spans):
            words = policy.who_said(question)
            if words is not None:
                return self.attribute(spans, question, words, collector, emit, policy)
        if o.locate and self.builder.style != "instruct" and policy.asks_about_time(question):
            located = self.locate(spans, question, collector, emit)
            if located is not None:
                return located
        if o.count and self.builder.style != "instruct":
            reading = policy.read(spans, question)
            if reading is not None:
                method, text, where = reading
                emit(AskStarted(question, self.model.name, 0, 0, len(spans), len(spans), False,
                                False))
                emit(AnswerDone(text, 0, method, 0.0))
                return Answer(question, text, [], list(spans), False, None, method,
                              collector.current, None, method,
                              evidence=[spans[i] for i in where])
        plan = self.prompt(spans, question)
        if plan.note:
            emit(Note(plan.note, "warning"))
        note = "; ".join(n for n in (plan.note, policy.note) if n) or None
        use = o.candidates and self.lossless
        if o.candidates and not self.lossless:
            emit(Note(f"{self.model.name}: its graph does not compute each token independently "
                      "of the others in a pass, so verified candidates could change the answer; "
                      "generating without candidates", "warning"))
        extract = o.extract and self.builder.style != "instruct"
        found = policy.candidates(plan.spans, question) if extract else []
        sources = self.sources(spans, question, drafter_text, plan) if use else None
        if use and found and "answers" in o.sources and self.model.trees:
            # The scored candidates' tree predicts where the greedy answer goes (verified;
            # a graph without tree passes has no tree to read it from).
            sources = TreeSource(len(plan.ids), sources if sources.lookups else None)
        emit(AskStarted(question, self.model.name, len(plan.ids), plan.transcript_tokens,
                        len(spans), len(plan.spans), plan.selected, use,
                        sources.names if sources else ()))
        scored: list[Candidate] = []
        seqs = {c.text: self.codec.text(" " + c.text) for c in found}

        def score_candidates(state, prompt_len: int, logits) -> None:
            # Under the prompt just prefilled, each candidate's likelihood as the answer.
            ids = [seqs[c.text] for c in found]
            if not ids or prompt_len + max(map(len, ids)) + 1 > state.capacity:
                return
            state.truncate(prompt_len)
            lps, tree = tree_score(state, logits, ids, plan.stop_ids)
            for c, t, lp in zip(found, ids, lps):
                c.score = c.likelihood = lp
                c.tokens = len(t)
                scored.append(c)
            if isinstance(sources, TreeSource):
                sources.tree = tree

        def calibrate(state, prompt_len: int, logits) -> None:
            self.calibrate(state, plan, scored, seqs)

        gen = SpeculativeGenerator(self.model, emit, self.prefix)
        # A transcript read whole is the same in every prompt about it: its rows are kept
        # for the next question (passages chosen for this question are not).
        context = 0 if plan.selected or not keep_rows else plan.question_at

        def run(max_new: int, score: bool = True):
            score = score and bool(found)
            return gen.generate(plan.ids, max_new, plan.stop_ids, sources,
                                calibrate if score else None, plan.static,
                                score_candidates if score else None, context)

        # Spans to score: the answer will be one of them unless none fits the context, so
        # generate only the token the prefill gives (no pass) unless a comparison is asked.
        result = run(1 if found and not o.compare else o.max_tokens)
        skipped = bool(scored) and len(result.tokens) < o.max_tokens and not o.compare
        if found and not scored and not o.compare:
            result = run(o.max_tokens)  # no span could be scored: generation is the answer
        scored.sort(key=rank)
        check = o.check and policy.not_said is not None
        # Only answers of the kind asked, adding to the question, every word said.
        fitting = policy.fitting(scored, question, spans) if check else scored
        pick = policy.choose(fitting, spans, question, plan.spans)
        if pick is None and skipped:
            # No span answers: the model's own answer is judged, so it is generated whole,
            # whether or not a comparison was asked (``compare`` never changes the answer;
            # the same greedy tokens, the prefill's head from the prefix cache).
            result, skipped = run(o.max_tokens, score=False), False
        if len(result.tokens) > 1:
            self.previous.append([t for t in result.tokens if t not in plan.stop_ids])
        text = self.answer_text(result.tokens, plan)
        method, generated, used = "generated", None, evidence(text, plan.spans)
        if pick is not None:
            method, generated, text = "extracted", None if skipped else text, pick.text
            used = [plan.spans[i] for i in pick.spans]
        elif check and (own := policy.fallback(text, question, spans, found)) is not None:
            text = own
            used = evidence(text, plan.spans) or plan.focus[:1]
        elif check:
            # Not of the kind asked, a restatement, or words the speaker never said: no
            # answer rather than a guess.
            method, generated, used = "not said", text, []
            text = policy.not_said
        elif not used and plan.focus:
            used = plan.focus[:1]
        tokens, stopped = ([], "extracted") if skipped else (result.tokens, result.stopped)
        emit(AnswerDone(text, len(tokens), stopped, result.prefill_seconds + result.seconds))
        return Answer(question, text, tokens, plan.spans, plan.selected, note, stopped,
                      collector.current, plan, method, generated, scored, evidence=used,
                      abstained=method == "not said")

    def calibrate(self, state, plan: PromptPlan, scored: list[Candidate],
                  seqs: dict[str, list[int]]) -> None:
        """Re-rank the likeliest candidates by how much the question raises their likelihood.

        A base model's likelihood of a span as the answer is largely its likelihood as *any*
        answer: the first sentence, short common phrases ("Beautiful.") win whatever is asked.
        Subtracting ``calibrate`` times the likelihood under :data:`NEUTRAL_QUESTION` (the
        same prompt up to the question; scored on the same cache after it) removes that
        prior. On the dev split of the question set, among the 22 questions answered by a
        candidate: 15 right by likelihood alone, 19 with 0.75 over the 6 likeliest (the same
        over 5 to all of them; 0.5: 17, 1.0: 15; the neutral question "What is the answer?"
        gave 19 too, an empty one 17).
        ``score`` becomes the calibrated value for those candidates, which rank first."""
        a, top = self.options.calibrate, self.options.calibrate_top
        if not a or top < 2 or len(scored) < 2 or not plan.question_at or self.builder.focused:
            return  # (qa-focus: its neutral prompt would lack the line every example shows)
        scored.sort(key=lambda c: -c.score)
        head = scored[:top]
        suffix = self.builder.suffix(NEUTRAL_QUESTION, plan.timed)
        start = plan.question_at + len(suffix)
        ids = [seqs[c.text] for c in head]
        if not suffix or start + max(map(len, ids)) + 1 > state.capacity:
            return
        state.truncate(plan.question_at)  # the suffix and the candidates run as one tree
        priors, _ = tree_score(state, None, ids, plan.stop_ids, prefix=suffix)
        for c, prior in zip(head, priors):
            c.prior = prior
            c.score = c.likelihood - a * prior
        scored.sort(key=rank)

    def locate(self, spans: Sequence[Span], question: str, collector: AnswerStatsCollector,
               emit: Listener) -> Answer | None:
        """The answer to a question about the recording's clock: the start of the span that
        says the words (quoted words first, then shared ones; the earliest on a tie), or None
        when no span shares a word with the question (the model answers then)."""
        ranked = rank_spans(spans, without_clock(question))  # not "time" of "at what time"
        if not ranked or ranked[0][0] <= 0:
            return None
        best = spans[ranked[0][1]]
        text = f"At {format_time(best.start)}: \u201c{best.text.strip()}\u201d"
        emit(AskStarted(question, self.model.name, 0, 0, len(spans), len(spans), False, False))
        emit(AnswerDone(text, 0, "located", 0.0))
        return Answer(question, text, [], list(spans), False, None, "located",
                      collector.current, None, "located", evidence=[best])

    def attribute(self, spans: Sequence[Span], question: str, words: str,
                  collector: AnswerStatsCollector, emit: Listener, policy) -> Answer:
        """The answer to "who said ``words``": the speaker of the passage that says them
        (method ``attributed``), or the policy's "does not say" when no passage says them or
        nobody is heard over it."""
        speaker, where = who_said(spans, words)
        emit(AskStarted(question, self.model.name, 0, 0, len(spans), len(spans), False, False))
        if speaker is None:
            text = policy.not_said or "The recording does not say."
            emit(AnswerDone(text, 0, "not said", 0.0))
            return Answer(question, text, [], list(spans), False, None, "not said",
                          collector.current, None, "not said",
                          evidence=[spans[where]] if where is not None else [],
                          abstained=True)
        emit(AnswerDone(speaker, 0, "attributed", 0.0))
        return Answer(question, speaker, [], list(spans), False, None, "attributed",
                      collector.current, None, "attributed", evidence=[spans[where]])

    def answer_text(self, tokens: Sequence[int], plan: PromptPlan) -> str:
        ids = [t for t in tokens if t not in self.builder.eos_ids]
        text = self.codec.decode(ids)
        if plan.one_line:
            text = text.split("\n", 1)[0]
        return text.strip()


def rank(c: Candidate) -> tuple[bool, float]:
    """Best first: calibrated candidates (the likeliest), then the rest by likelihood."""
    return c.prior is None, -c.score


def drafter_text(strategy, whisper) -> str | None:
    """The AS²D drafter's transcript of the last decode (its candidate stream, in the target
    Whisper's token ids), as text; None when the strategy had no drafter."""
    tokens = strategy.drafted_tokens()
    if not tokens:
        return None
    text = whisper.tokenizer.decode(tokens)
    return " ".join(text.split()) or None
