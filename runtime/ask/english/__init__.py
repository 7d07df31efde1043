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
* :mod:`~as2d.runtime.ask.english.who` — questions that ask who said something (answered
  with a speaker when the recording was diarized);
* :mod:`~as2d.runtime.ask.english.rules` — :class:`EnglishPolicy`, the one seam the pipeline
  calls.

Outside this package, English is read in two places the policy reaches but does not own: the
prompt's clock questions (:func:`as2d.runtime.ask.prompt.asks_about_time`, which the English
policy answers with and which also picks the prompt's timed examples) and the passage ranking's
content words (:mod:`as2d.runtime.ask.passages`: stems, number words, the answer-type nouns),
which read their word lists from :mod:`~as2d.runtime.ask.english.lexicon`.
"""
