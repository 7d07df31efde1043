"""Answers that the question's own shape points at, as classes (issue #28).

Each class is probed on short transcripts written for it (not taken from the question set),
with the question phrased more than one way, and without a model: the rules choose *which*
candidates the answer may be (:func:`extract.pinned`), or read the answer off the transcript's
words (:mod:`sequence`), or find the span a clock question is about.

* what comes *after X*: what the next clause says, never X again;
* the item named *right after X* in a list: as long as X;
* "From whom / With what ...?": the words in the wh-slot, modifiers included;
* "What should you (not) ask?": the verb's object, where the transcript negates it as asked;
* "besides X": never X; *where*: a place preposition such as "within" is a place;
* *the first / last words*: the first / last clause said;
* *the first / last digit*, *the number said twice in a row*, *how many X are named*: read off;
* *at what time* is X said: the span that says X, not one that says "time".
"""

from __future__ import annotations

import pytest

from as2d.runtime.ask.english.extract import candidates, pinned
from as2d.runtime.ask.english.kinds import adds_to, fits, order, qualifies, set_aside
from as2d.runtime.ask.english.sequence import sequence_answer
from as2d.runtime.ask.passages import rank_spans
from as2d.runtime.ask.prompt import without_clock
from as2d.runtime.ask.spans import Span


def lines(*texts: str) -> list[Span]:
    return [Span(3.0 * i, 3.0 * i + 3.0, t) for i, t in enumerate(texts)]


def shaped(spans: list[Span], question: str) -> set[str]:
    """The texts the answer may be: the qualifying candidates the question's shape pins."""
    fitting = [c for c in candidates(spans, question) if qualifies(c.text, question, spans)]
    return {c.text for c in pinned(fitting)}


DOOR = lines("Knock twice.", "Wait a moment.", "Open the door.", "Step inside.")
CARDS = lines("Two of diamonds.", "Jack of hearts.", "Nine of clubs.", "Ace of spades.")
BERRIES = lines("Never eat the yellow berries, eat the red ones.")
EVENING = lines("3. Good evening, everyone.", "Tonight we talk about bread, and then we eat it.")


@pytest.mark.parametrize("question,right", [
    ("What should you do after waiting?", "Open the door."),
    ("What should you do after you knock?", "Wait a moment."),
    ("What comes after 'open the door'?", "Step inside."),
])
def test_what_comes_after_x_is_the_next_clause(question, right):
    assert shaped(DOOR, question) == {right}


@pytest.mark.parametrize("spans,question,step", [
    (lines("Boil the water, then add the rice and stir it."),
     "What do you do after adding the rice?", "and stir it"),
    (lines("Boil the water, then add the rice and stir it."),
     "What do you do before adding the rice?", "boil the water"),
])
def test_before_or_after_x_is_the_nearest_step_on_that_side(spans, question, step):
    found = shaped(spans, question)
    assert found and all(c.lower().rstrip(".") in step for c in found)


def test_the_answer_after_x_is_not_x_again():
    assert not adds_to("Knock twice.", "What should you do after you knock?")
    assert not adds_to("He knocked again.", "What did he do after knocking?")
    assert adds_to("Wait a moment.", "What should you do after you knock?")
    assert not adds_to("Open the door.", "What should you do before you open the door?")


@pytest.mark.parametrize("spans,question,right", [
    (CARDS, "Which card is called right after the jack of hearts?", "Nine of clubs."),
    (CARDS, "Which card is read after the two of diamonds?", "Jack of hearts."),
])
def test_the_item_after_x_in_a_list_is_as_long_as_x(spans, question, right):
    assert shaped(spans, question) == {right}


@pytest.mark.parametrize("spans,question,right", [
    (lines("With great patience the old teacher repaired the clock."),
     "With what did the old teacher repair the clock?", "Great patience."),
    (lines("Hi. From distant cousins she inherited the farm."),
     "From whom did she inherit the farm?", "Distant cousins."),
])
def test_a_preposition_and_its_wh_word_ask_for_the_slot_with_its_modifiers(spans, question,
                                                                           right):
    assert shaped(spans, question) == {right}


def test_no_slot_when_the_transcript_does_not_mirror_the_question():
    spans = lines("She inherited the farm from her cousin.")
    found = candidates(spans, "From whom did she inherit the farm?")
    assert not [c for c in found if c.origin == "slot"]


@pytest.mark.parametrize("question,right", [
    ("What should you not eat?", "The yellow berries."),
    ("What should you never eat?", "The yellow berries."),
    ("What should you eat?", "The red ones."),
])
def test_the_verbs_object_where_it_is_negated_as_asked(question, right):
    assert shaped(BERRIES, question) == {right}


@pytest.mark.parametrize("question,right", [
    ("Which card is called first?", "Two of diamonds."),
    ("Which card is read last?", "Ace of spades."),
])
def test_the_item_named_first_or_last(question, right):
    assert shaped(CARDS, question) == {right}


def test_what_should_you_do_is_not_the_object_of_do():
    spans = lines("Ask what you can do for your town.")
    assert not [c for c in candidates(spans, "What should you do?") if c.origin == "object"]


def test_no_candidate_is_cut_before_a_modal():
    spans = lines("They wondered what the river would bring them.")
    texts = {c.text for c in candidates(spans, "What did they wonder about the river?")}
    assert "What the river." not in texts and "The river." not in texts
    assert "What the river would bring them." in texts


@pytest.mark.parametrize("spans,question,right", [
    (lines("It was a time of plenty, it was a time of hunger."),
     "What was it a time of, besides plenty?", "Hunger."),
    (lines("We kept the goats inside, we kept the old sheep inside."),
     "Besides the goats, what did we keep inside?", "Old sheep."),
])
def test_besides_x_in_a_clause_said_alike_is_the_item_in_xs_place(spans, question, right):
    assert shaped(spans, question) == {right}


def test_besides_x_is_never_x():
    question = "Besides the horses, what does the farmer keep?"
    assert not adds_to("Two horses and about thirty chickens.", question)
    assert not adds_to("A horse.", question)
    assert adds_to("About thirty chickens.", question)


@pytest.mark.parametrize("answer", ["Within the castle walls.", "Beneath the old bridge.",
                                    "Among the reeds.", "Upon the hill."])
def test_a_place_preposition_is_a_place(answer):
    assert fits("place", answer, set())


@pytest.mark.parametrize("question,right", [
    ("What are the speaker's last words?", "And then we eat it."),
    ("What are the final words?", "And then we eat it."),
    ("What are the speaker's first words?", "Good evening."),  # a bare number is no words
    ("What is the last sentence?", "Tonight we talk about bread, and then we eat it."),
])
def test_the_first_or_last_words_are_the_first_or_last_clause(question, right):
    assert shaped(EVENING, question) == {right}


@pytest.mark.parametrize("spans,question,right", [
    (lines("Dial 4172 now."), "What is the first digit said?", "Four."),
    (lines("Dial 4172 now."), "What is the last digit?", "Two."),
    (lines("Dial four one seven two now."), "What is the second digit said?", "One."),
    (lines("Gate 12, then gate 30."), "What is the last number said?", "Thirty."),
    (lines("Pick 3, 7, 7, 1."), "Which number is said twice in a row?", "Seven."),
    (lines("Six, nine, six."), "Which digit is said twice?", "Six."),
    (lines("We saw the tower of London and later the tower of Pisa."),
     "How many towers does the guide name?", "Two."),
    (lines("The hall of mirrors, the hall of fame, the hall of mirrors again."),
     "How many halls are mentioned?", "Two."),
])
def test_order_questions_are_read_off_the_words(spans, question, right):
    text, where = sequence_answer(spans, question)
    assert text == right and where


@pytest.mark.parametrize("spans,question", [
    (EVENING, "What are the speaker's first words?"),  # words, not one word
    (lines("Pick 3, 7, 1."), "Which number is said twice in a row?"),  # none is
    (lines("We saw two towers in London."), "How many towers are named?"),  # a number says
    (lines("We saw the tower."), "How many bridges are named?"),  # never said
    (lines("He has children, Tom and Ann."), "How many children does he say he has?"),
    (lines("Dial now."), "What is the first digit said?"),
])
def test_order_questions_without_an_answer_in_the_words_are_left_alone(spans, question):
    assert sequence_answer(spans, question) is None


@pytest.mark.parametrize("question", [
    "At what time does the speaker mention the harbour?",
    "At what point of the recording is the harbour mentioned?",
])
def test_a_clock_question_locates_its_subject_not_the_word_time(question):
    spans = lines("It was time to leave.", "We walked to the harbour at noon.")
    assert rank_spans(spans, without_clock(question))[0][1] == 1


@pytest.mark.parametrize("answer", ["Her cousins.", "The aunts.", "Two old sailors."])
def test_a_plural_word_for_people_is_who(answer):
    assert fits("who", answer, set())


@pytest.mark.parametrize("question,right", [
    ("What should you not open?", "The oven door."),
    ("What shouldn't you open?", "The oven door."),
    ("What didn't I eat?", "The soup."),
    ("What did I eat?", "The bread."),
])
def test_a_negation_said_as_a_contraction_is_a_negation(question, right):
    spans = lines("Don't open the oven door.", "I didn't eat the soup, I ate the bread.")
    assert shaped(spans, question) == {right}


def test_beside_is_a_place_not_besides():
    spans = lines("The church and the school stand on the square.",
                  "A small bakery stands beside the church.")
    assert "The school." not in shaped(spans, "What stands beside the church?")
    assert adds_to("The bakery beside the church.", "What stands beside the church?")
    assert shaped(spans, "Besides the church, what stands on the square?") >= {"The school."}


@pytest.mark.parametrize("spans,question", [
    # the digit of one number, not the recording's first
    (lines("Room 12 is on the left.", "The door code is 4172."),
     "What is the first digit of the door code?"),
    # one dog, said twice
    (lines("I have a dog.", "My dog is called Rex."), "How many dogs are mentioned?"),
    (lines("The tower was tall.", "The tower was old."), "How many towers are mentioned?"),
])
def test_order_questions_the_words_do_not_answer_are_not_read_off(spans, question):
    assert sequence_answer(spans, question) is None


def test_the_first_digit_of_the_recording_is_read_off():
    spans = lines("Room 12 is on the left.", "The door code is 4172.")
    assert sequence_answer(spans, "What is the first digit of the recording?")[0] == "One."


@pytest.mark.parametrize("question", [
    "Which place is named after the lake?",
    "What is the street called after?",
    "Which song is titled after her mother?",
    "After whom is the street called?",
])
def test_named_after_x_is_not_what_follows_x(question):
    assert order(question) is None


def test_named_after_does_not_set_the_answer_aside():
    assert adds_to("The lake.", "What is Millbrook named after?")
    assert not set_aside("Which place is named after the lake?")[1]
    assert order("What happens after the lake freezes?") is not None


@pytest.mark.parametrize("question", [
    "What were his last words?",
    "What were her last words to him?",
    "What were the king's last words?",
    "What were the last words of the old sailor?",
    "What was the first word the baby said?",
    "What was the first word Tom spoke?",
])
def test_someone_elses_first_or_last_words_are_not_the_recordings(question):
    spans = lines("The sailor lay still.", "Tell my wife I love her, he whispered.",
                  "And then the ship went quiet.")
    assert sequence_answer(spans, question) is None
    assert "And then the ship went quiet." not in shaped(spans, question)
    assert "The sailor lay still." not in shaped(spans, question)


@pytest.mark.parametrize("question,right", [
    ("What is the first word the speaker says?", "Hello."),
    ("What is the first word you hear?", "Hello."),
    ("What is the narrator's last word?", "Friends."),
])
def test_the_recordings_own_first_or_last_word_is_still_read_off(question, right):
    assert sequence_answer(lines("Hello there, my friends."), question)[0] == right


def test_and_between_nouns_is_not_a_step():
    spans = lines("Mix the flour and the sugar, and add two eggs.")
    found = shaped(spans, "What do you do after mixing the flour?")
    assert "And add two eggs." in found and not any("sugar" in c for c in found)


# The transcript's own "before X" / "after X": the clause it is attached to is the answer, on
# whichever side it is said ("Lock the door before you leave" and "Before you leave, lock the
# door" answer the same question), not the clause next to X's.
LEAVING = ("Pack your bag.", "Check the windows.")


@pytest.mark.parametrize("spans,question,right", [
    (lines(*LEAVING, "Lock the door before you leave."),
     "What should you do before you leave?", "Lock the door."),
    (lines(*LEAVING, "Before you leave, lock the door."),
     "What should you do before you leave?", "Lock the door."),
    (lines(*LEAVING, "And before you leave, lock the door.", "Then call a taxi."),
     "What should you do before leaving?", "Lock the door."),
    (lines("We cooked all afternoon.", "After dinner, we walked to the river."),
     "What did they do after dinner?", "We walked to the river."),
])
def test_x_said_with_the_questions_own_connective_answers_with_its_clause(spans, question,
                                                                          right):
    found = shaped(spans, question)  # the clause, and pieces of it for the model to choose
    assert right in found and all(c.lower().rstrip(".") in right.lower() for c in found)


def test_the_other_connective_keeps_the_order_of_the_steps():
    # "before the storm" says nothing of what came after it: the next step is still the answer.
    spans = lines("We left before the storm came.", "Then we waited at the station.")
    assert shaped(spans, "What did they do after the storm came?") == {
        "Then we waited at the station."}


def test_x_said_twice_is_taken_where_the_connective_is_said():
    # the first "cook the soup" says nothing of what follows it; the one after "after" does
    spans = lines("First we cook the soup.", "Then we eat the soup.",
                  "After we cook the soup, we always taste it.")
    found = shaped(spans, "What do they do after they cook the soup?")
    assert "We always taste it." in found and not any("eat" in c for c in found)


@pytest.mark.parametrize("spans,question,right", [
    # a time or degree word, or a time measure, before a fronted connective
    (lines("Shortly after the guests arrived, we served dinner."),
     "What did they do after the guests arrived?", "We served dinner."),
    (lines("Immediately after the bell rang, the children ran outside."),
     "What happened after the bell rang?", "The children ran outside."),
    (lines("The day after the party, we cleaned the house."),
     "What did they do after the party?", "We cleaned the house."),
    (lines("Two days after the wedding, they flew to Rome."),
     "What did they do after the wedding?", "They flew to Rome."),
    (lines("We cooked.", "Not long after the guests left, we washed up."),
     "What did they do after the guests left?", "We washed up."),
    # no comma after the fronted clause (Whisper often leaves it out)
    (lines("After dinner we walked to the river."), "What did they do after dinner?",
     "We walked to the river."),
    (lines("Before you leave lock the door."), "What should you do before you leave?",
     "Lock the door."),
    (lines("Long before the sun came up, the farmer fed the cows."),
     "What did the farmer do before the sun came up?", "The farmer fed the cows."),
    # X said twice: where the connective is said
    (lines("The war began in spring.", "Before the war, we lived in Paris."),
     "What happened before the war?", "We lived in Paris."),
])
def test_the_connectives_clause_is_found_past_lead_in_words(spans, question, right):
    found = shaped(spans, question)
    assert right in found and all(c.lower().rstrip(".") in right.lower() for c in found)


@pytest.mark.parametrize("spans,question,right", [
    # a negated clause is not what is done: the steps keep their order
    (lines("Never swim after you eat, wait an hour."), "What should you do after you eat?",
     "Wait an hour."),
    (lines("I never swim after I eat.", "I wait an hour."), "What do you do after you eat?",
     "I wait an hour."),
    # "what comes after X" asks for the next thing in a sequence
    (lines("Turn left after the bridge, then stop at the bakery."),
     "What comes after the bridge?", "Then stop at the bakery."),
])
def test_the_connective_rule_stays_out_where_it_does_not_apply(spans, question, right):
    assert right in shaped(spans, question)


def test_a_connective_of_another_x_is_not_this_ones():
    spans = lines("We went to the fair.", "Before that the rain stopped and we cleaned the car.")
    assert "We cleaned the car." not in shaped(spans, "What did they do before the rain stopped?")


def test_a_negated_clause_before_x_is_not_said_to_be_done():
    spans = lines("Do not open the oven before the timer rings.")
    assert "Do not open the oven." not in shaped(spans, "What should you do before the timer "
                                                       "rings?")


@pytest.mark.parametrize("spans,question,beyond", [
    (DOOR, "What should you do after you step inside?", True),
    (DOOR, "What should you do before you knock?", True),
    (DOOR, "What should you do after you knock?", False),
    (DOOR, "What should you do before you step inside?", False),
    (lines(*LEAVING, "Lock the door before you leave."), "What should you do before you leave?",
     False),  # the connective attaches the clause before it
    (lines("After dinner, we walked to the river."), "What did they do after dinner?", False),
    (DOOR, "What happens after the storm?", False),  # X is never said: nothing to go past
])
def test_a_question_past_the_recordings_end_is_said_to_be_beyond_it(spans, question, beyond):
    from as2d.runtime.ask.english.extract import said_nothing_beyond

    assert said_nothing_beyond(spans, question) is beyond
