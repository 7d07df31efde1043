"""English word classes, each defined once, for every rule of :mod:`as2d.runtime.ask.english`
(and the passage ranking's stop words and stems, :mod:`as2d.runtime.ask.passages`).

A rule that needs a narrower set for its own purpose (the prepositions that put a capitalised
word in a place, the auxiliaries that open a yes/no question) names it beside the rule, as a
part of a class here; no module writes its own list of determiners, prepositions, pronouns,
auxiliaries, sentence ends or titles.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def alternation(words: Iterable[str]) -> str:
    """``(?:w1|w2|...)`` for a regex, longest first (so "an" is tried before "a")."""
    return "(?:" + "|".join(sorted(words, key=lambda w: (-len(w), w))) + ")"


# -- determiners ---------------------------------------------------------------------------------
ARTICLES = _words("a an the")
DEMONSTRATIVES = _words("this that these those")
POSSESSIVES = _words("his her their its my your our")
QUANTIFIERS = _words("some any every each no")
# What may stand before a noun and points at one thing: "the", "this", "his" (not "some").
DEFINITE = ARTICLES | DEMONSTRATIVES | POSSESSIVES
DETERMINERS = DEFINITE | QUANTIFIERS

# -- pronouns ------------------------------------------------------------------------------------
SUBJECT_PRONOUNS = _words("i you he she it we they")
OBJECT_PRONOUNS = _words("me you him her it us them")

# -- prepositions --------------------------------------------------------------------------------
# Of place and direction ("in Lisbon", "behind the barn", "towards the sea").
PLACE_PREPOSITIONS = _words("""
in at on to from near by into onto under over across behind inside outside beside beyond
through within among amid amidst beneath underneath below above between upon throughout
opposite along around toward towards via
""")
PREPOSITIONS = PLACE_PREPOSITIONS | _words("""
of for with without about during until till after before like than as since regarding
concerning
""")

# -- auxiliaries ---------------------------------------------------------------------------------
DO_FORMS = _words("do does did")
BE_FORMS = _words("is was are were")  # finite ("be", "been" are not: AUXILIARIES has them)
HAVE_FORMS = _words("has have had")
MODALS = _words("can could will would should might must may shall")
AUXILIARIES = DO_FORMS | BE_FORMS | HAVE_FORMS | MODALS | _words("be been")

# -- sentences -----------------------------------------------------------------------------------
SENTENCE_ENDS = ".?!"
CLAUSE_ENDS = ",;:" + SENTENCE_ENDS
# Abbreviated titles whose full stop ends no sentence ("Mr. Dashwood").
TITLE_ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Prof")
# A word (a transcript token, quotes and brackets aside) that is one of them.
TITLE_END = re.compile(alternation(TITLE_ABBREVIATIONS) + r"\.$")
_NOT_A_TITLE = "".join(rf"(?<!\b{t}\.)" for t in TITLE_ABBREVIATIONS)
# Where one sentence ends and the next begins: the space after an end mark that is no title's.
SENTENCE_BREAK = rf"(?<=[{re.escape(SENTENCE_ENDS)}]){_NOT_A_TITLE}\s+"

# -- times ---------------------------------------------------------------------------------------
MONTHS = _words("""
january february march april may june july august september october november december
""")
WEEKDAYS = _words("monday tuesday wednesday thursday friday saturday sunday")
# In order: ORDINALS[0] is "first".
ORDINALS = tuple("""
first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth
fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth thirtieth
""".split())

# -- negation, number scales, stop words, irregular forms -----------------------------------------
NEGATIONS = _words("not no never nor none nothing nobody")
NUMBER_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
# Words that say nothing about the content (the passage ranking's and the content-word
# comparison's): function words, and the words about the recording itself.
STOP_WORDS = _words("""
a about above after again against all am an and any are as at be because been before being
below between both but by can did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will
with would you your yours say says said speaker recording audio transcript mention mentioned
tell told talk talking
""")

# Common irregular verb forms → the base form, so that "paid" in an answer meets "pay" in the
# transcript and "went" in a question meets "go" in an answer (a restatement in other tenses
# is still a restatement; a word said in another tense is still said). Regular inflections are
# :func:`stem`'s.
IRREGULAR = {form: base for base, forms in (
    ("be", "am is are was were been being"), ("have", "has had having"),
    ("do", "does did done doing"), ("go", "goes went gone going"),
    ("say", "says said"), ("make", "made"), ("take", "took taken"), ("come", "came"),
    ("see", "saw seen"), ("give", "gave given"), ("get", "got gotten"), ("pay", "paid"),
    ("buy", "bought"), ("bring", "brought"), ("think", "thought"), ("tell", "told"),
    ("find", "found"), ("leave", "left"), ("keep", "kept"), ("feel", "felt"),
    ("meet", "met"), ("sell", "sold"), ("send", "sent"), ("spend", "spent"),
    ("build", "built"), ("hold", "held"), ("stand", "stood"), ("sit", "sat"),
    ("lose", "lost"), ("win", "won"), ("run", "ran"), ("eat", "ate eaten"),
    ("drink", "drank drunk"), ("write", "wrote written"), ("speak", "spoke spoken"),
    ("know", "knew known"), ("grow", "grew grown"), ("throw", "threw thrown"),
    ("fly", "flew flown"), ("draw", "drew drawn"), ("drive", "drove driven"),
    ("ride", "rode ridden"), ("rise", "rose risen"), ("choose", "chose chosen"),
    ("break", "broke broken"), ("wake", "woke woken"), ("wear", "wore worn"),
    ("tear", "tore torn"), ("begin", "began begun"), ("sing", "sang sung"),
    ("swim", "swam swum"), ("ring", "rang rung"), ("sink", "sank sunk"),
    ("fall", "fell fallen"), ("forget", "forgot forgotten"), ("hide", "hid hidden"),
    ("bite", "bit bitten"), ("lead", "led"), ("feed", "fed"), ("read", "read"),
    ("hear", "heard"), ("teach", "taught"), ("catch", "caught"), ("fight", "fought"),
    ("seek", "sought"), ("sleep", "slept"), ("sweep", "swept"), ("weep", "wept"),
    ("lend", "lent"), ("bend", "bent"), ("mean", "meant"), ("deal", "dealt"),
    ("lay", "laid"), ("lie", "lain"), ("stick", "stuck"), ("strike", "struck"),
    ("swing", "swung"), ("hang", "hung"), ("dig", "dug"), ("shine", "shone"),
    ("shoot", "shot"), ("slide", "slid"), ("light", "lit"), ("burn", "burnt"),
    ("learn", "learnt"), ("dream", "dreamt"), ("become", "became"), ("understand", "understood"),
    ("child", "children"), ("man", "men"), ("woman", "women"), ("person", "people"),
    ("foot", "feet"), ("tooth", "teeth"), ("mouse", "mice"),
) for form in forms.split()}
