"""The ``as2d ask`` question set: loading, locating its clips, and scoring answers.

The set (``bench/ask_questions.json``) asks who/what/when questions about real clips, each with
a short checkable answer. Scoring is deliberately simple and strict enough to be honest: the
answer must contain one accepted phrase as whole words (so "no" does not match "not"), must not
contain a rejected one, and a "when" answer must name a time inside the segment that holds the
words (a one-second tolerance either side, since the transcript shows whole seconds).
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from as2d.runtime.ask.spans import parse_times

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ROOT / "bench" / "ask_questions.json"
_LIBRIVOX = Path("/usr/share/pocketsphinx/test/data")


@dataclass(frozen=True)
class Question:
    id: str
    clip: str
    kind: str  # who / what / when
    question: str
    accept: tuple[str, ...] = ()
    reject: tuple[str, ...] = ()
    time: tuple[float, float] | None = None


@dataclass
class QuestionSet:
    clips: dict[str, Path]
    questions: list[Question] = field(default_factory=list)


def resolve_clip(ref: str) -> Path:
    """``repo:PATH``, ``moonshine:PATH`` (inside the moonshine-voice package) or
    ``pocketsphinx:PATH`` (under the pocketsphinx-testdata folder) → a file path."""
    scheme, _, rel = ref.partition(":")
    if scheme == "repo":
        return ROOT / rel
    if scheme == "moonshine":
        spec = importlib.util.find_spec("moonshine_voice")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the clip needs the moonshine-voice package (pip install "
                                    "moonshine-voice)")
        return Path(list(spec.submodule_search_locations)[0]) / rel
    if scheme == "pocketsphinx":
        return _LIBRIVOX / rel
    return Path(ref)


def load_questions(path: str | Path = QUESTIONS) -> QuestionSet:
    doc = json.loads(Path(path).read_text())
    clips = {name: resolve_clip(ref) for name, ref in doc["clips"].items()}
    qs = []
    for item in doc["questions"]:
        if item["clip"] not in clips:
            raise ValueError(f"{item['id']}: unknown clip {item['clip']!r}")
        if not item.get("accept") and not item.get("time"):
            raise ValueError(f"{item['id']}: needs accept or time")
        qs.append(Question(item["id"], item["clip"], item.get("kind", "what"), item["question"],
                           tuple(item.get("accept", ())), tuple(item.get("reject", ())),
                           tuple(item["time"]) if item.get("time") else None))
    return QuestionSet(clips, qs)


def normalize_words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("-", " "))


def _contains(words: list[str], phrase: str) -> bool:
    p = normalize_words(phrase)
    return bool(p) and any(words[i:i + len(p)] == p for i in range(len(words) - len(p) + 1))


_SECONDS = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b")


def answer_times(text: str) -> list[float]:
    """Times an answer names: ``m:ss`` / ``h:mm:ss`` and ``12 s`` / ``12.5 seconds``."""
    return parse_times(text) + [float(x) for x in _SECONDS.findall(text.lower())]


def is_correct(q: Question, answer: str) -> bool:
    words = normalize_words(answer)
    if any(_contains(words, r) for r in q.reject):
        return False
    if q.time is not None:
        lo, hi = q.time
        return any(lo - 1.0 <= t <= hi + 1.0 for t in answer_times(answer))
    return any(_contains(words, a) for a in q.accept)
