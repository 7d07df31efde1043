"""The English answer rules: hand-written English behind the answer policy
(:mod:`as2d.runtime.ask.policy`).

* :mod:`~as2d.runtime.ask.english.lexicon` — the word classes, each defined once (determiners,
  prepositions, pronouns, auxiliaries, sentence ends and titles, number words, stop words,
  irregular forms);
* :mod:`~as2d.runtime.ask.english.kinds` — the kind of answer a question asks for, and whether
  an answer is of that kind and said;
* :mod:`~as2d.runtime.ask.english.extract` — candidate answers taken from the transcript, and
  "how many times" counted;
* :mod:`~as2d.runtime.ask.english.sequence` and :mod:`~as2d.runtime.ask.english.yesno` —
  answers read off the transcript's order of words, and yes/no readings;
* :mod:`~as2d.runtime.ask.english.rules` — :class:`EnglishPolicy`, the one seam the pipeline
  calls.

Nothing outside this package reads English words to answer, except what the prompt and the
passage ranking share with it through the lexicon (stop words and stems).
"""
