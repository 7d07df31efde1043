"""What kind of answer a question asks for, and whether an answer is of that kind and said.

A question's first words say what would answer it: *who* wants a person (a name, or a word for
a person, in a few words; not a place's name), *how many / how much / what number* a count,
*how long* a duration (a unit of time), *how old* an age, *how far* a distance, *when* a time,
*where* a place; and any answer must add something to the question (an answer that
only restates the question's words says nothing). These checks are about classes of answers,
not about any question: they read the answer's words and the transcript's capitalisation only.

An answer is *grounded* when every content word it has (stop words aside, a negation counted)
was said in the transcript, allowing inflections (``-s``, ``-ed``, ``-ing``, common irregular
forms) and number words for digits; a reply of small words only must be said word for word.
A model's own sentence (an instruction model's answer) may repeat the question's words around
what it adds ("Who signed the letter?" → "The letter was signed by Susan Ford."): those words
are the question's framing, so its premise is taken as given, as an extracted span ("Susan
Ford") takes it; what the sentence adds must be said, and a negation is never framing.
An amount must be the one the question is about (:func:`bound`): not another number of the
same sentence.
An answer that is neither of the kind asked nor grounded is not given; when nothing
qualifies the answer is :data:`NOT_SAID`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache

from as2d.runtime.ask.english.lexicon import (
    DEFINITE,
    DETERMINERS,
    MONTHS,
    ORDINALS,
    PLACE_PREPOSITIONS,
    SENTENCE_BREAK,
    SENTENCE_ENDS,
    SUBJECT_PRONOUNS,
    TITLE_END,
    WEEKDAYS,
    alternation,
)
from as2d.runtime.ask.passages import NUMBER_WORDS, content_words, numbers_as_digits
from as2d.runtime.ask.spans import Span

NOT_SAID = "The recording does not say."

_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")

# Adjectives of size that "how ...?" asks about ("How big is the hotel?", "How tall ..."):
# answered by a word of size or an amount (:func:`fits`), found in what is said of the thing
# (the answer's candidates, :mod:`as2d.runtime.ask.english.extract`).
SIZE_ADJECTIVES = ("big", "large", "small", "tall", "high", "wide", "deep", "heavy", "thick",
                   "short")
# Of those, the ones a description answers ("a *small* hotel"); the others ask for a measure
# ("How heavy was it?" → "two kilos", not "the biggest").
DESCRIBED_SIZES = ("big", "large", "small")
# "What colour ...", "Which month ...", "What is the name of ...", "What's her name ..."
_WHAT_IS_THE = (r"\b(?:(?:what|which)(?: (?:is|was|are|were))?|what['\u2019]s) "
                r"(?:(?:the|his|her|their|its|your|my|our) )?")

# The kind of answer a question asks for, by its leading words (after a short lead-in such as
# "And" or "So", or a clause ending in a comma: "Mary planted the roses, and what did ...").
_KINDS = (
    ("count", re.compile(r"\b(?:how (?:many|much)|(?:what|which) (?:number|amount|quantity|"
                         r"price|sum)\b)", re.I)),
    ("duration", re.compile(r"\b(?:how long|for how long|(?:what|which) length of time)\b",
                            re.I)),
    ("age", re.compile(r"\b(?:how old|(?:at )?what age)\b", re.I)),
    ("distance", re.compile(r"\b(?:how far|what distance)\b", re.I)),
    # a "what" of a closed class: the answer must be of that class, or the recording does
    # not say ("What colour is the rose?" is not answered by a number; "What was the name of
    # the woman he married?" not by "a more amiable woman")
    ("relation", re.compile(r"\b(?:how (?:is|was|are|were) .{1,40}? related|(?:what|which) "
                            r"(?:is|was|are|were) (?:the |(?:his|her|their|its|[a-z]+['\u2019]s) )?"
                            r"relation(?:ship)?|what relation)\b", re.I)),
    ("job", re.compile(r"\b(?:what|which)(?: (?:is|was|are|were))? (?:(?:his|her|their|your|"
                       r"my|our) |(?:the )?[a-z]+['\u2019]s )(?:job|occupation|profession|"
                       r"trade)s?\b|\bwhat (?:does|did|do) (?:\w+ ){1,3}?(?:do for a living|"
                       r"work as)\b", re.I)),
    ("colour", re.compile(_WHAT_IS_THE + r"colou?rs?\b", re.I)),
    ("name", re.compile(_WHAT_IS_THE + r"(?:(?:[a-z]+ ){0,2}[a-z]+['\u2019]s )?"
                        r"(?:first |last |full |sur)?"
                        r"names?\b(?!.*\babout\W*$)", re.I)),
    ("date", re.compile(_WHAT_IS_THE + r"(?:date|day of the month)\b", re.I)),
    ("month", re.compile(_WHAT_IS_THE + r"months?\b", re.I)),
    ("size", re.compile(r"\bhow (?:" + "|".join(SIZE_ADJECTIVES) + r")\b|" + _WHAT_IS_THE
                        + r"size\b", re.I)),
    ("time", re.compile(r"\b(?:when|what time|what year|what day|which year|which day)\b", re.I)),
    ("who", re.compile(r"\b(?:who|whom|whose)\b", re.I)),
    # a condition: "In what situation ...?", "Under what circumstances ...?"
    ("condition", re.compile(r"\b(?:(?:in|under) (?:what|which) (?:situations?|circumstances?)|"
                             r"under (?:what|which) conditions?|in what cases?)\b", re.I)),
    # a reason: "Why ...?", "For what reason ...?", "What is the reason ...?", "How come ...?"
    ("reason", re.compile(r"\b(?:why|how come|for what reasons?|what(?:['\u2019]s|\s+(?:is|was|"
                          r"are|were))?\s+(?:(?:the|his|her|their|its|your|my|our)\s+)?(?:main\s+|"
                          r"real\s+)?reasons?)\b", re.I)),
    ("place", re.compile(r"\b(?:where|(?:what|which) (?:city|town|country|place|village|street|"
                         r"room|building|part of the (?:city|town|country|world)))\b", re.I)),
    ("what", re.compile(r"\b(?:what|which)\b", re.I)),
)

_PERSON = frozenset("""
man men woman women boy boys girl girls child children baby lady ladies gentleman gentlemen
sir madam mister miss mrs mr ms dr doctor father mother brother sister son daughter husband
wife uncle aunt cousin nephew niece grandfather grandmother parent parents family friend
friends king queen prince princess lord duke captain officer soldier teacher student master
servant people person speaker narrator author writer everyone nobody somebody someone
colonel general priest judge nurse neighbour neighbor stranger guest host owner driver
creature creatures being beings soul souls god gods spirit spirits crowd audience
guide guides chef cook pilot clerk thief chief guard coach maid monk nun poet pope saint scout
bride groom hero heroine heir crew staff team police agent pupil tenant client patient
citizen resident expert youth elder elders child's folk folks human humans mayor chairman
boss mate partner lover enemy ally kid kids
""".split())

_TIME = frozenset("""
morning evening night noon midnight afternoon dawn dusk today tonight yesterday tomorrow
then now later soon before after ago during while since until till once early late
year years month months week weeks day days hour hours minute minutes second seconds
century centuries decade season spring summer autumn fall winter christmas easter
monday tuesday wednesday thursday friday saturday sunday january february march april may
june july august september october november december o'clock am pm time age ages moment
always never sometimes first last next past recently eventually already instantly when
whenever if
""".split())

# A duration is a unit of time (with its amount: "twelve days", "an hour", "a long time") or
# a word that is one ("forever"); "long" or a bare number alone is not ("On the pier for a
# long." does not say how long, and "3" could count anything).
_DURATION = frozenset("""
year years month months week weeks day days hour hours minute minutes second seconds
century centuries decade decades moment moments while forever ages night nights time times
lifetime fortnight
""".split())

# An age may be said in words as well as years ("a young man", "an elderly lady").
_AGE = frozenset("""
young younger youngest old older oldest elderly aged teenage teenager teen teens middle
child baby infant boy girl adult grown
""".split())

_DISTANCE = frozenset("""
mile miles meter meters metre metres kilometer kilometers kilometre kilometres foot feet
inch inches yard yards step steps block blocks way far near league leagues
""".split())

_PLACE_WORDS = frozenset("""
in at on to from near by into onto under over across behind inside outside beside beyond
through within among amid amidst beneath underneath below above between upon throughout
here there home abroad away upstairs downstairs where somewhere anywhere everywhere
nowhere forward forwards backward backwards back left right up down ahead along around
house room street road city town village country church school garden park market station
shop store office sea river lake mountain hill field forest wood island beach coast harbour
harbor port world land kingdom north south east west hall kitchen bed door table window
""".split())

# Words that introduce a place: a capitalised word after them is a place ("in Lisbon", "on
# Mill Street"), not a person, whatever else it may be.
_PLACE_PREPOSITIONS = frozenset("in at to from near into inside outside opposite across "
                                "through toward towards via on".split())

_COLOURS = frozenset("""
red orange yellow green blue purple violet pink brown black white grey gray gold golden silver
scarlet crimson navy turquoise beige cream ivory amber maroon lilac indigo tan blonde blond
khaki teal olive
""".split())

# How one person is related to another: kin, and the other ties a question may mean.
_RELATIONS = frozenset("""
father mother brother sister son daughter husband wife uncle aunt cousin nephew niece
grandfather grandmother grandson granddaughter grandparent grandparents grandchild parent
parents child children sibling siblings twin stepfather stepmother stepson stepdaughter
father-in-law mother-in-law brother-in-law sister-in-law fiance fiancee boyfriend girlfriend
partner friend neighbour neighbor colleague boss employer employee teacher student pupil
dad mum mom grandma grandpa granny rival rivals manager coworker co-worker roommate flatmate
classmate married engaged stepbrother stepsister godfather godmother godson goddaughter
""".split())

_MONTHS = MONTHS
_ORDINALS = frozenset(ORDINALS)

# How big (tall, heavy, ...) is answered by an amount or by a word of size.
_SIZES = frozenset(SIZE_ADJECTIVES) | frozenset("""
big bigger biggest large larger largest small smaller smallest little tiny huge enormous
vast giant tall taller tallest short shorter high low wide narrow deep shallow heavy light
thick thin long size sized medium massive
""".split())


_COUNT_WORDS = frozenset("""
no none zero once twice several few many dozen dozens hundred hundreds thousand thousands
million millions pair couple both all half some
""".split())


# Words about the recording and the exchange itself ("The speaker says ...", "The answer is
# ..."): an instruction model frames its answer with them; they are not claims about what was
# said, so grounding and the restatement check look past them.
_META = frozenset("""
answer answers question questions recording recordings transcript transcripts segment
segments speaker speakers reader narrator say says said saying speak speaks speaking spoke
mention mentions mentioned mentioning talk talks talked talking tell tells told ask asks asked
""".split())

# Lead-ins that frame an answer: "The answer (to this question) is:", "Answer:", "Sure!".
_FRAME = re.compile(r"^\s*(?:(?:sure|okay|ok|yes)[,.!]\s*)?(?:(?:the\s+)?answer(?:\s+to\s+"
                    r"(?:the|this|your)\s+question)?\s*(?:is|would be)?\s*[:\-]?\s*)", re.I)


def unframed(answer: str) -> str:
    """The answer without a lead-in that only frames it ("The answer to this question is: 3
    dollars." → "3 dollars."), quotes around the whole answer dropped."""
    text = _FRAME.sub("", answer, count=1).strip()
    if len(text) > 2 and text[0] in "\"'“" and text.rstrip(".")[-1:] in "\"'”":
        text = text[1:].rstrip(".")[:-1].strip()
    return text or answer.strip()


_META_STEMS = frozenset(content_words(" ".join(_META)))


def _claims(text: str) -> list[str]:
    """The content words of ``text`` that say something about the content (not the framing
    words of :data:`_META`, compared after the same light stemming)."""
    return [w for w in content_words(text) if w not in _META_STEMS]


# An answer is checked against the same transcript once per candidate; a span's words depend
# on its text alone, so they are worked out once per text.
@lru_cache(maxsize=4096)
def _span_words(text: str) -> frozenset[str]:
    return frozenset(content_words(text))


def question_kind(question: str) -> str:
    """``who``, ``count``, ``duration``, ``age``, ``distance``, ``time``, ``place``, a "what"
    of a closed class (``colour``, ``name``, ``date``, ``month``, ``size``, ``job``, and
    ``relation`` between people), ``reason`` (why), ``condition`` ("in what situation"),
    ``what`` or ``other`` (how, yes/no): the
    kind of the question's first wh-phrase ("Who had leisure to consider how much ...?" asks
    who), the more specific phrase where two start together ("What time ..." is a time, not a
    "what"). "How is X related to Y?" asks for a relation between people only when it speaks
    of people ("How is the rain related to the flooding?" is a *what*)."""
    found = []
    for order, (kind, pattern) in enumerate(_KINDS):
        m = pattern.search(question)
        if m and (kind != "relation" or _speaks_of_people(question)):
            found.append((m.start(), order, kind))
    return min(found)[2] if found else "other"


_PRONOUNS = frozenset("i me you he him she her we us they them speaker narrator caller".split())


def _speaks_of_people(question: str) -> bool:
    """A name (a capitalised word not first), a person word or a personal pronoun."""
    tokens = _WORD.findall(question)
    return any((i and t[0].isupper() and t != "I") or t.lower() in _PRONOUNS
               or is_person(t.lower().split("'")[0]) for i, t in enumerate(tokens))


def _lower_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _is_number(word: str) -> bool:
    return word.isdigit() or word in NUMBER_WORDS or bool(re.fullmatch(r"\d+(?:st|nd|rd|th)",
                                                                          word))


def names_in(spans: Iterable[Span]) -> set[str]:
    """Lower-cased words the transcript capitalises inside a sentence (names: "Dashwood",
    "Norland"); a sentence's or a segment's first word and "I" are not evidence."""
    out: set[str] = set()
    for s in spans:
        tokens = s.text.split()
        for i, t in enumerate(tokens):
            w = "".join(_WORD.findall(t))
            if not w or not w[0].isupper() or w == "I" or i == 0:
                continue
            if tokens[i - 1].rstrip("\"'”’)").endswith(tuple(SENTENCE_ENDS)) and \
                    not TITLE_END.search(tokens[i - 1]):
                continue
            out.add(w.lower())
    return out


_NAME_OF = re.compile(r"\bnames?\s+of\s+(?:" + alternation(DEFINITE) + r"\s+)?([^?,;]+)|"
                      r"\b([A-Za-z-]+)['\u2019]s\s+(?:first |last |full |sur)?"
                      r"names?\b", re.I)


def named_with(answer: str, question: str, spans: Sequence[Span]) -> bool:
    """For "What is the name of X?" ("X's name"), whether ``answer`` is said in a sentence that
    says X's head noun ("the Lions *goalkeeper*", "the *woman* he married", "Anna's *hotel*"),
    or the next ("We got a puppy. *Rex* is a retriever."): a name said elsewhere names
    something else ("the Cup Final" is not the name of the goalkeeper). True where the
    question names no X, or the transcript never says that noun (it may call the dog a
    puppy)."""
    m = _NAME_OF.search(question)
    if not m:
        return True
    phrase = _RELATIVE.split(m.group(1) or m.group(2))[0]
    head = content_words(phrase)[-1:]
    if not head:
        return True
    mine = set(content_words(answer)) - _META_STEMS
    text = " ".join(s.text for s in spans)
    sentences = [set(content_words(t)) for t in _SENTENCE.split(text)]
    if not any(head[0] in said for said in sentences):
        return True  # X in other words ("the dog" for "a puppy"): no sentence to hold it to
    return any(head[0] in said and (mine <= said or mine <= nxt)
               for said, nxt in zip(sentences, sentences[1:] + [set()]))


# Titles of a person (not "St", "Lady", "Father": a church, a ship, a pub take them too).
_TITLES = frozenset("mr mrs ms miss dr doctor sir madam professor prof captain".split())
_WEEKDAYS = WEEKDAYS


def names_kind(answer: str, question: str, names: set[str], places: set[str]) -> bool:
    """For "What is the name of X?", whether ``answer`` is the name of X's kind of thing: a
    person's X ("the harbour master's name") is named by a name that is no place's ("Castle"
    of "Castle Island", "the ferry to Castle Island") and no weekday's ("until Monday"; a
    month may be a name, June), a thing ("the name of the antibiotic") not by a person's, one
    with a title ("Dr Rivera"). True where the question names no X."""
    m = _NAME_OF.search(question)
    if not m:
        return True
    head = _lower_words(_RELATIVE.split(m.group(1) or m.group(2))[0])[-1:]
    words = _lower_words(answer)
    if not head or not words:
        return True
    if is_person(head[0]):
        # a name that is no place's and no weekday's, in an answer that is no place phrase
        # ("the ferry to Castle Island")
        if any(w in _PLACE_PREPOSITIONS and j + 1 < len(words) and words[j + 1] in names
               for j, w in enumerate(words)):
            return False
        return any(w in names and w not in places and w not in _WEEKDAYS for w in words)
    return words[0] not in _TITLES


# Where a noun phrase's head has been said: "the woman | he married", "the man | who came".
_RELATIVE = re.compile(r"\s+(?:he|she|they|i|we|you|it|who|whom|that|which|whose)\b", re.I)


def first_word_names(spans: Iterable[Span], subjects: bool = False) -> set[str]:
    """Capitalised words that open a sentence and are names all the same: never written in
    lower case elsewhere in the transcript and not small words ("*Rex* is a golden retriever";
    not "*Every* morning", which :func:`names_in` may not tell from a name). ``subjects``:
    only those a person's verb follows ("*Priya* will write ...", "*Tom* said ..."), where a
    name is wanted for *who* (not "*Bring* a dish")."""
    lower: set[str] = set()
    first: set[str] = set()
    for s in spans:
        tokens = s.text.split()
        for i, raw in enumerate(tokens):
            w = "".join(_WORD.findall(raw))
            if not w:
                continue
            if w[0].islower():
                lower.add(w.lower())
            elif (i == 0 or re.search(r"[.?!][\"'\u201d\u2019)]*$", tokens[i - 1])) and \
                    (not subjects or (i + 1 < len(tokens) and raw[-1:].isalnum()
                                      and tokens[i + 1].lower() in _SUBJECT_VERBS)):
                first.add(w.lower())
    return {w for w in first - lower
            if content_words(w) and w != "i" and w not in _TIME and w not in _OPENERS}


# Words that order the steps of a list, no time of their own.
_STEP_WORDS = frozenset("first firstly secondly thirdly finally lastly".split())

# Words after a person's name as a sentence's subject ("Priya will", "Tom said").
_SUBJECT_VERBS = frozenset("""
will would can could should shall may might must is was has had does did said says told asked
and who thinks thought wants wanted
""".split())


# Words that open a sentence without naming anyone ("Every morning", "Finally, ...").
_OPENERS = frozenset("""
every each all some any most many few finally first firstly secondly lastly next then also
still however meanwhile suddenly perhaps maybe yes no please thanks hello hi well so today
""".split())


# Person nouns are an open class, but of their endings only a few say a person on their own
# ("fisherman", "pianist", "musician"); "-er", "-or", "-ant" and "-ess" end as many things
# ("tower", "computer", "elephant", "dress") as people, so those people are listed.
_PERSON_ENDINGS = ("man", "men", "ist", "ists", "ian", "ians")
_NOT_PERSON = frozenset("""
specimen abdomen stamen wrist wrists twist twists exist assist resist insist persist consist
median
""".split())
_PERSON_NOUNS = frozenset("""
farmer fisher sailor baker butcher carpenter painter singer dancer player worker preacher
reader rider hunter miner builder banker lawyer prisoner passenger traveller traveler
visitor actor governor inventor professor manager leader keeper shopkeeper innkeeper
gardener messenger robber murderer beggar minister sheriff jailer jailor warrior shepherd
merchant giant peasant assistant attendant lieutenant sergeant emperor ancestor villager
islander foreigner commander hostess actress waitress goddess countess duchess mistress
stewardess heiress witness tailor customer
engineer founder treasurer secretary president director officer official authority
authorities committee council government plumber electrician mechanic firefighter
photographer journalist reporter editor designer developer programmer researcher scientist
surgeon dentist pharmacist vet lecturer tutor principal volunteer member members caller
winner loser landlord landlady receptionist cashier waiter
""".split())


# Relations that are also jobs ("my teacher", "her manager").
_ROLES = frozenset("teacher student pupil boss employer employee manager colleague".split())

# Words for a person that say nothing of what they do.
_PERSON_GENERIC = frozenset("""
man men woman women boy boys girl girls child children baby lady ladies gentleman gentlemen
person people someone somebody everyone nobody friend friends family
""".split())

# Listed words that are a person only as a phrase's head ("a human being", "living beings"),
# and a verb elsewhere ("it being received"). ("One" is no person: "a much faster one".)
_PERSON_AS_HEAD = frozenset("being beings".split())


def _person_word(w: str) -> bool:
    """A listed word for a person, or its plural ("cousins", "aunts")."""
    return w in _PERSON or (w.endswith("s") and w[:-1] in _PERSON)


def is_person(word: str) -> bool:
    """A word for a person: listed, or a noun with a person's ending ("fisherman",
    "pianist", "musician")."""
    w = word.split("'")[0]
    if _person_word(w) or w in _PERSON_NOUNS or (w.endswith("s") and w[:-1] in _PERSON_NOUNS):
        return True
    return len(w) > 4 and w.endswith(_PERSON_ENDINGS) and w not in _NOT_PERSON \
        and w not in _TIME and w not in _PLACE_WORDS


# "to", "from", "at" and "on" introduce people as often as places ("gave it to Marianne",
# "smiled at Elinor"): a name after them is a place only with a place word ("on Mill Street",
# "at Barton Park").
_WEAK_PLACE_PREPOSITIONS = frozenset("to from at on".split())
_PLACE_NOUNS = frozenset("""
street road lane avenue square park hall house court castle abbey manor cottage farm city town
village country church chapel school college university garden market station shop store
office sea river lake mountain hill field forest wood woods island beach coast harbour harbor
port bridge bay valley islands palace tower hotel inn
""".split())
_TITLE_END = TITLE_END


def _name_runs(text: str) -> Iterator[tuple[str | None, list[str]]]:
    """Each run of capitalised words of ``text`` with the preposition that introduces it
    ("in the old | Lisbon"; small words such as "the" and "old" between them), None when
    none does; a run and its preposition end at a sentence's or a clause's punctuation."""
    prep, run = None, []
    for raw in text.split():
        t = "".join(_WORD.findall(raw))
        w = t.lower()
        if w in _PLACE_PREPOSITIONS:
            if run:
                yield prep, run
                run = []
            prep = w
        elif t and t[0].isupper():
            run.append(t)
        elif run:
            yield prep, run
            prep, run = None, []
        elif t and w not in ("the", "a", "an", "old", "new"):
            prep = None
        if raw.rstrip("\"'\u201d\u2019)").endswith((".", "?", "!", ";", ",")) and \
                not _TITLE_END.search(raw):
            if run:
                yield prep, run
            prep, run = None, []
    if run:
        yield prep, run


def places_in(spans: Iterable[Span]) -> set[str]:
    """The names of :func:`names_in` that, wherever they occur, follow a word introducing a
    place ("in Lisbon", "on Mill Street"): places, not people. A name also said elsewhere
    ("Elinor was tired") is not a place, and a sentence's end ends the place."""
    inside: set[str] = set()
    outside: set[str] = set()
    for s in spans:
        for prep, run in _name_runs(s.text):
            place = prep is not None and (prep not in _WEAK_PLACE_PREPOSITIONS
                                          or run[-1].lower() in _PLACE_NOUNS)
            (inside if place else outside).update(t.lower() for t in run)
    return inside - outside


# A person is named in a few words besides the name ("Mr. John Dashwood", "the old fisherman",
# "a sailor called Pedro"); more is a clause about someone ("At dawn his son rowed out to the
# island with a basket."), not who. Framing words ("The speaker says it was ...") don't count.
_WHO_WORDS = 3


_PLACE_PREPOSITIONS_ALL = PLACE_PREPOSITIONS
# (and "old", "new": "in the *old* town" is still a place after its preposition)
_DETERMINER_WORDS = DETERMINERS | {"old", "new"}


def _thing_after(words: Sequence[str], i: int) -> bool:
    """Whether the preposition at ``words[i]`` is followed (past determiners) by a word that is
    neither a time, a number nor a person: the place it introduces."""
    for w in words[i + 1:i + 4]:
        if w in _DETERMINER_WORDS:
            continue
        return bool(content_words(w)) and w not in _TIME and not _is_number(w) \
            and not is_person(w)
    return False


def fits(kind: str, answer: str, names: set[str], places: set[str] = frozenset()) -> bool:
    """Whether ``answer`` is of the kind a question of ``kind`` asks for (``places``: the
    names that are places, :func:`places_in`, no answer to *who*)."""
    words = _lower_words(answer)
    if not words:
        return False
    has_number = any(_is_number(w) for w in words)
    if kind == "who":
        if all(_is_number(w) for w in words) or \
                len(set(_claims(answer)) - set(content_words(" ".join(names)))) > _WHO_WORDS:
            return False
        # a person word anywhere ("his daughter Anna"); a person by its ending, or "being",
        # only as the phrase's last word, its head ("the old fisherman", not "his tender air";
        # "a living being", not "it being received")
        return any((w in names and w not in places)
                   or (_person_word(w.split("'")[0]) and w not in _PERSON_AS_HEAD)
                   for w in words) \
            or is_person(words[-1])
    if kind == "count":
        return has_number or any(w in _COUNT_WORDS for w in words)
    if kind == "duration":  # (or a length: "How long is the cave?")
        return any(w in _DURATION or w in _DISTANCE for w in words)
    if kind == "age":
        return has_number or any(w in _DURATION or w in _AGE for w in words)
    if kind == "distance":
        return any(w in _DISTANCE for w in words) or has_number
    if kind == "time":  # not a list's first step alone ("*First*, the launch has moved ...")
        if set(words) <= _STEP_WORDS:
            return False
        return has_number or any(w in _TIME for w in words)
    if kind == "relation":  # said as it is, not denied: "business rivals, not friends"
        return any((w in _RELATIONS or (w.endswith("s") and w[:-1] in _RELATIONS))
                   and (i == 0 or words[i - 1] not in ("not", "no", "never"))
                   for i, w in enumerate(words))
    if kind == "job":  # a word for what a person is ("a teacher", "a nurse"), not a name
        return any(is_person(w) and w not in names and w not in _PERSON_GENERIC
                   and (w not in _RELATIONS or w in _ROLES) for w in words)
    if kind == "colour":
        return any(w in _COLOURS for w in words)
    if kind == "name":  # a name the transcript says, in a few words (not a clause)
        return any(w in names for w in words) and \
            len(set(_claims(answer)) - set(content_words(" ".join(names)))) <= _WHO_WORDS
    if kind == "date":  # the day of a month: "the first", "the 12th", "12"
        return any(w in _ORDINALS or _is_number(w) for w in words)
    if kind == "month":
        return any(w in _MONTHS for w in words)
    if kind == "size":  # a word of size, or an amount ("ten metres", "five hundred people")
        return has_number or any(w in _SIZES for w in words)
    if kind == "place":
        if content_words(answer) and all(w in _TIME or _is_number(w)
                                         for w in _lower_words(answer)
                                         if content_words(w)):
            return False  # "On Tuesday evening." is when, not where
        # a place word or a place's name, or a preposition of place with a thing after it:
        # "in a garage", "at my place"; not "in 1987 by two engineers"
        return any((w in _PLACE_WORDS and w not in _PLACE_PREPOSITIONS_ALL)
                   or (w in names and w not in _TIME) for w in words) \
            or any(w in _PLACE_PREPOSITIONS_ALL and _thing_after(words, i)
                   for i, w in enumerate(words))
    if kind == "condition":  # "if you get a rash", "unless it rains", "had he married ..."
        return states_condition(answer)
    if kind == "reason":
        # a reason, or what a reason may be said with ("To pick up his daughter.", "For a foul
        # ...", "By accident.", "So that it cannot fall over."); not a bare phrase of place,
        # means or time ("In the garden.", "With the strap.", "On Sunday."), though a clause
        # opening with one may be ("In March it froze.")
        if _bare(words, _NOT_A_REASON) and not set(words) & _REASON_WORDS:
            return False
        return not (content_words(answer) and all(w in _TIME or _is_number(w) for w in words
                                                  if content_words(w)))
    return True


# What opens a phrase of place, means or time, which alone gives no reason ("Why should the
# bookcase be fixed to the wall?" is not answered "With the strap."); and words that give one
# ("by accident", "in memory of", "on account of"; "from the frost" is a cause).
_NOT_A_REASON = frozenset("in at on with by through over into inside outside under near beside "
                          "during until till across behind onto upon within".split())
_REASON_WORDS = frozenset("""
because since so as cause caused causes reason reasons due order otherwise else case lest
accident mistake memory honour honor protest account behalf response fear lack request sake
thanks result
""".split())
# A condition said as one, opening the answer: "If you get a rash", "Unless it rains", "In case
# of fire", "Only when it is dark", or inverted: "*Had* he married a more amiable woman".
_CONDITION = re.compile(r"^\W*(?:(?:and|but|only|even|just|except)\s+)?(?:if|unless|when|"
                        r"whenever|provided|providing|in case|as long as|so long as|once|"
                        r"(?:had|were|should)\s+(?:he|she|it|they|we|you|i|there|the|a|an|"
                        r"[a-z]+['\u2019]s)\b)\b", re.I)


def states_condition(answer: str) -> bool:
    """Whether ``answer`` opens with a condition (:data:`_CONDITION`): what "in what
    situation" asks for."""
    return bool(_CONDITION.match(answer))
_BARE_WORDS = 4  # a phrase, not a clause ("Over night it turns much colder" says more)
_SUBJECTS = SUBJECT_PRONOUNS | {"there"}


def _bare(words: Sequence[str], openers: frozenset[str]) -> bool:
    """Whether lower-case ``words`` are a short phrase opened by one of ``openers`` ("with the
    strap"), not a clause (no subject pronoun after it: "in March it froze")."""
    return bool(words) and words[0] in openers and len(words) <= _BARE_WORDS \
        and not _SUBJECTS & set(words[1:])


# "Who in her family ...?", "Who among his relatives ...?": who is one of the family, so the
# answer says which one ("her mother"), not a name said elsewhere.
_FAMILY = re.compile(r"\b(?:who|whom)\s+(?:in|of|among|from)\s+(?:(?:the|his|her|their|my|your|"
                     r"our|its)\s+)?(?:family|families|relatives|relations)\b", re.I)
_KIN_PLURALS = frozenset({"kids", "grandchildren", "children", "relatives", "folks"})


def _in_the_group(answer: str, question: str, kind: str) -> bool:
    """Whether a *who* restricted to a family (:data:`_FAMILY`) is answered with a word for a
    relative ("her mother", "his two uncles", "her grandchildren"); every other answer
    passes."""
    if kind != "who" or not _FAMILY.search(question):
        return True
    return any(w in _RELATIONS or w in _KIN_PLURALS or (w.endswith("s") and w[:-1] in _RELATIONS)
               for w in _lower_words(answer))


# "How tall / heavy / deep ...?" asks for a measure ("two metres"), unlike "how big" ("a small
# hotel" says it); "how warm / cold ...?" for a temperature ("about 19 degrees", "below
# freezing"), which a bare number ("Four.") does not say.
_MEASURED = re.compile(r"\bhow (tall|wide|deep|heavy|thick|warm|hot|cold|cool)\b", re.I)
_TEMPERATURE = frozenset("degree degrees celsius centigrade fahrenheit freezing zero frost "
                         "warm warmer warmest hot hotter hottest cold colder coldest cool cooler "
                         "mild chilly".split())
_SIGNED = frozenset({"minus", "plus", "below", "above"})  # "minus five", "below 10"
_UNITS = frozenset("""
metre metres meter meters centimetre centimetres centimeter centimeters millimetre
millimetres kilometre kilometres kilometer kilometers foot feet inch inches yard yards mile
miles kilo kilos kilogram kilograms gram grams pound pounds ounce ounces ton tons tonne tonnes
stone storey storeys story stories floor floors
""".split())


def _a_measure(answer: str, question: str, kind: str) -> bool:
    """Whether the answer to "how tall ..." says an amount, a unit or the adjective itself
    ("knee-deep", "very heavy"), and to "how warm ..." a temperature ("19 degrees", "minus
    five", "freezing") (:data:`_MEASURED`); every other answer passes."""
    m = _MEASURED.search(question)
    if m is None or kind not in ("size", "other"):
        return True
    asked = m.group(1).lower()
    words = _lower_words(answer)
    if any(asked in w for w in words):
        return True
    if asked in ("warm", "hot", "cold", "cool"):
        return any(w in _TEMPERATURE or (w in _SIGNED and i + 1 < len(words)
                                         and _is_number(words[i + 1]))
                   for i, w in enumerate(words))
    return any(_is_number(w) or w in _UNITS for w in words)


# Phrases that say where a thing came from or what went with it, not what it is.
_ORIGIN = frozenset({"from", "with"})
# A *what* a phrase may answer: a title ("On the Road"), a way or route ("By train"), words
# said or written, an event.
_WHAT_OF_PHRASES = re.compile(r"\b(?:book|film|movie|song|title|name|called|way|route|say|says|"
                              r"said|shout\w*|write|wrote|written|sign|happen\w*|like)\b", re.I)


def _bare_phrase(answer: str, question: str, kind: str) -> bool:
    """Whether ``answer`` is only a short phrase of origin or company ("From Leeds.", "With
    his dog.") given to a *what* that asks for a thing ("What did the listener send?"): such a
    phrase answers from where or with whom, not what; unless the question holds its
    preposition ("What did he fix it with?") or asks for a title, a way, words said or an
    event (:data:`_WHAT_OF_PHRASES`)."""
    if kind != "what":
        return False
    words = _lower_words(answer)
    return _bare(words, _ORIGIN) and words[0] not in _lower_words(question) \
        and not _WHAT_OF_PHRASES.search(question)


_GIVES_REASON = re.compile(r"^\W*(?:(?:and|but|just|only|mainly|partly|simply)\s+)?(?:because|"
                           r"so that|so as to|in order to|in order that|in case|due to|"
                           r"owing to|otherwise|or else)\b", re.I)
# "As ..." / "Since ..." opening a clause give a reason, except as a time or a comparison ("as
# soon as", "as well as", "since Monday").
_AS_SINCE = re.compile(r"^\W*(as|since)\s+(\w+)", re.I)
_AS_NOT_REASON = frozenset("soon well long far if though usual always much many a an".split())


def gives_reason(answer: str) -> bool:
    """Whether ``answer`` opens with a reason said in so many words ("Because the stock is
    salty", "So that it cannot fall over", "In case it rains", "As it was late"; not "the
    school closed because ...", which restates before it gives one): of the candidates that
    fit a *why*, these come first (:meth:`as2d.runtime.ask.answer.Answerer.choose`)."""
    if _GIVES_REASON.match(answer):
        return True
    m = _AS_SINCE.match(answer)
    if m is None:
        return False
    nxt = m.group(2).lower()
    if m.group(1).lower() == "as":
        return nxt not in _AS_NOT_REASON
    return nxt not in _TIME and not _is_number(nxt)


# "Besides X, what else ...?" sets X aside; "What comes after (before) X?" asks for what
# follows (precedes) X. ("Beside X" is a place, next to X: "What stands beside the church?"
# asks for what is next to the church, not for what is listed with it.)
BESIDES = re.compile(r"\b(?:besides|apart from|other than|except(?: for)?|as well as|"
                     r"in addition to|along with)\s+([^,?;]+)", re.I)
ORDER = re.compile(r"\b(?:right |just |immediately |directly |straight |soon )?(after|before)\s+"
                   r"([^,?;]+)", re.I)


# "named / called / titled after X" is in honour of X, not what follows X.
_NAMED = re.compile(r"\b(?:named|called|titled)\s+$", re.I)
_NAMED_WH = re.compile(r"^(?:whom|who|what|which)\b.*\b(?:named|called|titled)\b", re.I)


def order(question: str) -> re.Match[str] | None:
    """The question's "after X" / "before X" (:data:`ORDER`) where it asks what follows
    (precedes) X; None where "after" names what something is named for ("Which place is named
    after the lake?", "After whom is the street called?")."""
    for m in ORDER.finditer(question):
        if not (_NAMED.search(question[:m.start(1)]) or _NAMED_WH.match(m.group(2))):
            return m
    return None


# Who "the first / last word(s)" are said by: the recording (its speaker, "you" who hear it)
# or someone in its story ("his last words", "the first word the baby said").
_RECORDING = (r"(?:speaker|narrator|reader|recording|audio|clip|transcript|passage|text|speech|"
              r"talk|announcer|host|voice)")
_POSSESSOR = re.compile(r"\b(his|her|their|its|[a-z]+['’]s)\s+$", re.I)
_SPEAKER = re.compile(r"^\s+(?:(?:that|which)\s+)?(?:(?:the|a|an|this|his|her|their|my|your|"
                      r"our)\s+([a-z'-]+)|(he|she|they|it|you|we|i|one)\b)(?=\s+[a-z])", re.I)
_NAME = re.compile(r"^\s+(?:(?:that|which)\s+)?[A-Z][a-z]+\s+[a-z]")


def said_by_someone_else(question: str, start: int, end: int) -> bool:
    """Whether the words ``question[start:end]`` ("last words", "first word") ask about what
    someone in the story said ("What were *his* last words?", "the first word *the baby*
    said", "the last words *Tom* spoke") rather than the recording itself ("the speaker's
    last words", "the first word you hear"): then the recording's own first or last words
    are not the answer."""
    before = _POSSESSOR.search(question[:start])
    if before:
        owner = before.group(1).lower().replace("’", "'")
        if not re.fullmatch(_RECORDING + "'s", owner):
            return True
    rest = question[end:]
    of = re.match(r"^\s+of\s+(?:the\s+|this\s+)?([a-z'-]+)", rest, re.I)
    if of:  # "the last words of the king"
        return not re.fullmatch(_RECORDING, of.group(1), re.I)
    m = _SPEAKER.match(rest)
    if m:
        noun, pronoun = m.group(1), (m.group(2) or "").lower()
        return not re.fullmatch(_RECORDING, noun or "", re.I) if noun else \
            pronoun in ("he", "she", "they", "it")
    return bool(_NAME.match(rest))


def set_aside(question: str) -> tuple[frozenset[str], frozenset[str]]:
    """The content words of what a question sets aside (``"besides X"``: none of them may be
    in the answer) and of the event an answer must follow or precede (``"after X"``, ``"before
    X"``: not all of them may be; the answer is what comes next or before, not X again)."""
    m, n = BESIDES.search(question), order(question)
    return (frozenset(content_words(m.group(1))) if m else frozenset(),
            frozenset(content_words(n.group(2))) if n else frozenset())


def adds_to(answer: str, question: str) -> bool:
    """Whether the answer says something the question does not: a content word or a number of
    its own, or, with no content word at all, a short reply ("No.", "Then."); and it is not
    what the question sets aside (:func:`set_aside`: "Besides the cows, what ..." is not
    answered "The cows and the horses", "What did she do after the storm?" not "The storm
    ended")."""
    mine = _claims(answer)
    if not mine:
        return not content_words(answer)  # small words only ("No."); framing alone is none
    besides, after = set_aside(question)
    if besides & set(mine) or (after and after <= set(mine)):
        return False
    return bool(set(mine) - set(content_words(question)))


def said(answer: str, spans: Sequence[Span], framing: str = "") -> bool:
    """Every content word of ``answer`` occurs in the transcript (inflections, common irregular
    forms and number words for digits allowed, as :func:`as2d.runtime.ask.passages.content_words`
    normalises them; a negation counts as a word), or in ``framing``: the question, where an
    answer in a sentence of its own repeats the question's words around what it adds ("The
    letter was signed by Susan Ford."; what it adds must still be said, and
    :func:`adds_to` wants something added). An answer of small words only ("No.", "Not
    now.") says nothing checkable word by word, so it must be said as it is, word for word."""
    # A negation is never framing: "Susan Ford did not sign it." must be said as a negation.
    have: set[str] = set(_span_words(framing)) - {"not"} if framing else set()
    for s in spans:
        have |= _span_words(s.text)
    claims = _claims(answer)
    if not [w for w in claims if w != "not"]:
        mine = _lower_words(answer)
        said_words = [w for s in spans for w in _lower_words(s.text)]
        n = len(mine)
        return not mine or any(said_words[i:i + n] == mine for i in range(len(said_words) - n + 1))
    return all(w in have for w in claims)


def qualifies(answer: str, question: str, spans: Sequence[Span], names: set[str] | None = None,
              kind: str | None = None, places: set[str] | None = None,
              sentence: bool = False) -> bool:
    """Of the kind asked, adding to the question, said in the transcript, where it is an
    amount, the amount the question is about (:func:`bound`), and not said only of the
    opposite of what is asked (:func:`not_opposed`). ``sentence``: the answer is a model's
    own sentence, which may repeat the question's words (see :func:`said`); a span of the
    transcript is held to the transcript alone."""
    if names is None:
        names = names_in(spans)
    if places is None:
        places = places_in(spans)
    kind = kind or question_kind(question)
    if kind == "name":
        names = names | first_word_names(spans)
        if not named_with(answer, question, spans) or \
                not names_kind(answer, question, names, places):
            return False
    elif kind == "who":
        names = names | first_word_names(spans, subjects=True)
    return (fits(kind, answer, names, places) and not _bare_phrase(answer, question, kind)
            and _in_the_group(answer, question, kind) and _a_measure(answer, question, kind)
            and adds_to(answer, question)
            and said(answer, spans, question if sentence else "")
            and bound(answer, question, spans, kind)
            and not_opposed(answer, question, spans, kind))



# -- amounts: which number of the transcript the question is about -------------------------------

_SEGMENT = re.compile(r"[,;:.?!]+|\s(?:and|but|or|while|whereas)\s", re.I)
_AMOUNT_KINDS = frozenset({"count", "duration", "age", "distance", "time"})
_HOW_MANY = re.compile(r"\b(?:how many|(?:what|which) number of)\s+((?:[A-Za-z'-]+\s+){0,2})",
                       re.I)
_UNIT_WORDS = 2


def _segments(text: str) -> list[list[str]]:
    """``text`` cut where one statement of an amount ends and another may begin (punctuation,
    "and", "but"), each as lower-case words with number words merged into digits."""
    return [numbers_as_digits([w.split("'")[0] for w in _WORD.findall(part.lower())])
            for part in _SEGMENT.split(text) if part.strip()]


_SENTENCE_END = re.compile(f"[{re.escape(SENTENCE_ENDS)}]+")


@lru_cache(maxsize=1024)
def _statements(text: str) -> tuple[tuple[tuple[str, ...], frozenset[str],
                                          dict[int, frozenset[str]], int], ...]:
    """Each statement of :func:`_segments` with its content words, for each number in it its
    :func:`_unit` (by the number's position), and the index of its sentence; once per text."""
    out = []
    for n, sentence in enumerate(_SENTENCE_END.split(text)):
        for seg in _segments(sentence):
            units = {i: frozenset(_unit(seg, i)) for i, w in enumerate(seg) if w.isdigit()}
            out.append((tuple(seg), frozenset(content_words(" ".join(seg))), units, n))
    return tuple(out)


def _unit(words: Sequence[str], i: int) -> set[str]:
    """The stems of the content words right after the number at ``words[i]`` (up to two,
    up to the first small word): what it counts ("twelve *days*", "three long *days*";
    "five of them" counts nothing named)."""
    out = set()
    for w in words[i + 1:i + 1 + _UNIT_WORDS]:
        stems = content_words(w)
        if not stems or stems[0].isdigit():
            break
        out.add(stems[0])
    return out


# Counted nouns that count the same things (as stems): "How many staff ...?" is answered by
# "four hundred employees" or "people"; "people" answers for any group of people but
# children.
_SAME_COUNT = tuple(frozenset(content_words(g)) for g in (
    "staff employees workers", "students pupils", "children kids", "fans spectators supporters",
    "guests visitors attendees", "customers clients shoppers"))
_ANY_PEOPLE = frozenset(content_words("people persons"))
_PEOPLE = _ANY_PEOPLE | frozenset().union(
    *[g for g in _SAME_COUNT if "child" not in g]) | frozenset(content_words(
        "passengers members residents citizens participants players"))


def _asked_noun(question: str) -> frozenset[str]:
    """The stems of the thing a "how many X" question counts ("how many *days*", "what number
    of *chickens*"), skipping a small word or an adjective before it, with the nouns that
    count the same things (:data:`_SAME_COUNT`); empty for "how much"."""
    m = _HOW_MANY.search(question)
    if not m:
        return frozenset()
    for w in m.group(1).split():
        stems = content_words(w)
        if stems:
            noun = stems[0]
            same = frozenset({noun}).union(*[g for g in _SAME_COUNT if noun in g])
            people = _ANY_PEOPLE if noun in _PEOPLE else frozenset()
            return same | people
    return frozenset()


# Verbs (as stems) on two sides of one event: the time a shop opens is no answer to when it
# closes. Words of one side say the same ("shut" is "close", "begin" is "start").
_SIDES = ((frozenset({"open"}), frozenset({"clos", "shut"})),
          (frozenset({"start", "begin"}), frozenset({"end", "finish", "stop"})),
          (frozenset({"arriv"}), frozenset({"leav", "depart"})))
# "Open until nine" says when it closes; "closed until Monday" when it opens.
_UNTIL = frozenset({"until", "till"})
# A side's word as a noun ("at the end of", "from the start") is no verb of the event.
_AS_NOUN = re.compile(r"\b(?:the|an?|its|his|her|their)\s+(?:very\s+)?"
                      r"(?:end|start|beginning|finish|opening|closing|arrival|departure)\b", re.I)
_OPPOSED_KINDS = frozenset({"time", "duration", "date", "month"})


def _sides(question: str) -> tuple[frozenset[str], frozenset[str]]:
    """The stems of the side the question asks about and of the other side, or two empty
    sets when it asks about none (or names it as a noun: "the end of the week")."""
    words = set(content_words(_AS_NOUN.sub(" ", question)))
    for a, b in _SIDES:
        if words & a and not words & b:
            return a, b
        if words & b and not words & a:
            return b, a
    return frozenset(), frozenset()


def not_opposed(answer: str, question: str, spans: Sequence[Span],
                kind: str | None = None) -> bool:
    """For a question about when (how long) something happens, False when every statement
    that says ``answer`` says only the other side of the question's verb: "The market *opens*
    at eight in the morning" answers when it opens, not "What time does the market close?";
    and False for any answer when the transcript says only the other side, never the asked
    one ("open until nine" says both)."""
    if (kind or question_kind(question)) not in _OPPOSED_KINDS:
        return True
    asked, other = _sides(question)
    mine = set(content_words(answer)) - _META_STEMS
    if not asked or not mine:
        return True
    statements = [(set(seg), words) for s in spans for seg, words, _, _ in _statements(s.text)]

    def says_asked(seg: set[str], words: frozenset[str]) -> bool:
        return bool(words & asked or (words & other and seg & _UNTIL))

    if not any(says_asked(*st) for st in statements) and \
            any(words & other for _, words in statements):
        return False  # only the other side is said: the recording does not say what is asked
    saying = [(seg, words) for seg, words in statements if mine <= words]
    return not saying or any(says_asked(seg, words) or not words & other
                             for seg, words in saying)


def bound(answer: str, question: str, spans: Sequence[Span], kind: str | None = None) -> bool:
    """Whether the numbers of an amount answer are the transcript's numbers that the question
    is about, not another number of the same sentence.

    A number is bound to what it counts (the words right after it) and to its statement (the
    words around it up to a comma or an "and"). For "how many X" a number that counts
    something else ("twelve *days*" for "how many children") is not an answer; among the rest,
    only the numbers whose statement shares the most of the question's content words (the
    counted noun counting twice; then their line's) answer it ("He paid three dollars for the
    tram and forty dollars for the hotel": "How much did the tram cost?" → three). An answer
    without a number
    ("Twice.", "Saturday.") is not held to this."""
    kind = kind or question_kind(question)
    if kind not in _AMOUNT_KINDS:
        return True
    mine = {w for w in content_words(answer) if w.isdigit()}
    if not mine:
        return True
    asked = _asked_noun(question) if kind == "count" else frozenset()
    qwords = set(content_words(question)) - _META_STEMS
    if asked and not any(asked & _span_words(s.text) for s in spans):
        return False  # "how many passengers" where no passenger is mentioned: not said
    best, winners, unrivalled = (0, 0), set(), set()
    for s in spans:
        line = _span_words(s.text)
        statements = _statements(s.text)
        # sentences where a statement names what is asked: a number of another statement of
        # that sentence is of something else ("the doors open at ten, and entry is free")
        rivalled = {n for _, words, _, n in statements if qwords & words}
        for seg, words, units, n in statements:
            for i, w in enumerate(seg):
                if not w.isdigit():
                    continue
                unit = units[i]
                if asked and unit and not asked & unit:
                    continue  # counts something else
                # its statement first; a bare "In 1998," also takes its line's ("In 1998,
                # the barn burned down"), a statement of its own does not ("the doors open
                # at ten, and entry is free")
                bare = not (words - {w} - unit)
                score = (len(qwords & words) + bool(asked & unit),
                         len(qwords & line) if bare else 0)
                if score > best:
                    best, winners = score, {w}
                elif score == best:
                    winners.add(w)
                if score == (0, 0) and n not in rivalled:
                    unrivalled.add(w)
    if best == (0, 0):
        # no statement of a number shares a word with the question (it paraphrases them:
        # "When did the concert start?" for "It began at eight."): any number whose sentence
        # says nothing else of what is asked may answer; only a better-bound number refuses
        return bool(mine & unrivalled)
    return bool(mine & winners)


# Sentence ends (not a title's full stop: "Mr. John Dashwood") and line breaks.
_SENTENCE = re.compile(SENTENCE_BREAK + r"|\n+")


def first_qualifying(answer: str, question: str, spans: Sequence[Span],
                     names: set[str] | None = None, kind: str | None = None) -> str | None:
    """The generated answer, or failing that its first sentence (or line), unframed, that
    qualifies: an instruction model often answers in its first sentence and then goes on in
    words the recording never said. None when no part qualifies."""
    if names is None:
        names = names_in(spans)
    whole = unframed(answer)
    parts = [whole] + [unframed(p) for p in _SENTENCE.split(answer) if p.strip()]
    for part in parts:
        if part and qualifies(part, question, spans, names, kind, sentence=True):
            return part
    return None
