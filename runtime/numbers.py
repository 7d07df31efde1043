"""Number words and their digits: "ten" and "10" are one number, whoever wrote it which way.

Shared by the aligner (tiny.en writes "10 of clubs" where base says "Ten of clubs") and the
answer checks of ``as2d ask`` (an answer "Forty minutes." is said where the transcript has
"40 minutes").
"""

from __future__ import annotations

NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
NUMBER_WORDS.update({w: str(10 * i) for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)})
