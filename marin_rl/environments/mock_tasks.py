"""Procedurally generated tasks a ~100k-parameter character model can learn on a CPU.

Every prompt and answer is short printable ASCII (a question under ~25 characters, an answer under ~30), so a
character-level model with a 128-token context handles them; `chain` is the exception (worked answers up to 99
characters, see chain_task.py). A task draws one (question, answer) from a numpy
Generator; the same generator state always gives the same problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from marin_rl.environments.chain_task import (
    CHAIN_FORMAT,
    chain_final_answer,
    chain_level,
    chain_space_size,
    draw_chain,
)

Draw = Callable[[np.random.Generator], tuple[str, str]]


@dataclass(frozen=True)
class MockTask:
    name: str
    draw: Draw  # rng -> (question, answer)
    space_size: int  # number of distinct questions (for choosing shared vs disjoint eval splits)
    answer_format: re.Pattern  # what a well-formed answer looks like (the format reward)
    level: str | None = None  # difficulty label reported in per-level metrics
    needs_correctness: bool = True  # False: "cats", any response that mentions the word is rewarded
    description: str = ""
    # Set for tasks whose drawn answer is a worked solution: maps a response to the part that is graded (the gold
    # is that part of the drawn answer; the whole drawn answer is the SFT reference). None = exact match.
    final_answer: Callable[[str], str | None] | None = None
    level_of: Callable[[str], str] | None = None  # drawn answer -> its difficulty label (overrides `level`)


def _addition(high: int) -> Draw:
    def draw(rng: np.random.Generator) -> tuple[str, str]:
        a, b = (int(x) for x in rng.integers(0, high + 1, size=2))
        return f"{a}+{b}", str(a + b)

    return draw


def _comparison(rng: np.random.Generator) -> tuple[str, str]:
    a, b = (int(x) for x in rng.choice(100, size=2, replace=False))
    return f"larger of {a} and {b}", str(max(a, b))


_OPPOSITE_PAIRS = (
    ("hot", "cold"),
    ("big", "small"),
    ("up", "down"),
    ("left", "right"),
    ("day", "night"),
    ("fast", "slow"),
    ("old", "new"),
    ("open", "closed"),
    ("wet", "dry"),
    ("full", "empty"),
    ("early", "late"),
    ("high", "low"),
    ("hard", "soft"),
    ("light", "dark"),
    ("long", "short"),
    ("rich", "poor"),
    ("win", "lose"),
    ("in", "out"),
    ("yes", "no"),
    ("top", "bottom"),
    ("push", "pull"),
    ("buy", "sell"),
    ("near", "far"),
    ("thick", "thin"),
    ("loud", "quiet"),
    ("happy", "sad"),
    ("first", "last"),
    ("black", "white"),
    ("north", "south"),
    ("east", "west"),
    ("young", "old"),
    ("clean", "dirty"),
    ("strong", "weak"),
    ("alive", "dead"),
)
# "old" has two opposites above; each question must have exactly one answer, so keep the first pairing only.
_OPPOSITES: dict[str, str] = {}
for _left, _right in _OPPOSITE_PAIRS:
    _OPPOSITES.setdefault(_left, _right)
    _OPPOSITES.setdefault(_right, _left)
_OPPOSITE_WORDS = tuple(sorted(_OPPOSITES))


def _opposites(rng: np.random.Generator) -> tuple[str, str]:
    word = _OPPOSITE_WORDS[int(rng.integers(len(_OPPOSITE_WORDS)))]
    return f"opposite of {word}", _OPPOSITES[word]


_COUNT_ALPHABET = "abc"
_COUNT_MIN_LEN, _COUNT_MAX_LEN = 3, 8


def _counting(rng: np.random.Generator) -> tuple[str, str]:
    length = int(rng.integers(_COUNT_MIN_LEN, _COUNT_MAX_LEN + 1))
    text = "".join(rng.choice(list(_COUNT_ALPHABET), size=length))
    letter = _COUNT_ALPHABET[int(rng.integers(len(_COUNT_ALPHABET)))]
    return f"count {letter} in {text}", str(text.count(letter))


_REVERSE_MIN_LEN, _REVERSE_MAX_LEN = 3, 6
_LOWERCASE = "abcdefghijklmnopqrstuvwxyz"


def _reverse(rng: np.random.Generator) -> tuple[str, str]:
    length = int(rng.integers(_REVERSE_MIN_LEN, _REVERSE_MAX_LEN + 1))
    text = "".join(rng.choice(list(_LOWERCASE), size=length))
    return f"reverse {text}", text[::-1]


_CAT_TOPICS = (
    "the sea",
    "a tree",
    "rain",
    "my day",
    "music",
    "food",
    "the sky",
    "a house",
    "books",
    "snow",
    "a car",
    "summer",
    "the moon",
    "a garden",
    "coffee",
    "games",
    "a river",
    "bread",
    "winter",
    "birds",
)
CAT_WORD = "cat"


def _cats(rng: np.random.Generator) -> tuple[str, str]:
    topic = _CAT_TOPICS[int(rng.integers(len(_CAT_TOPICS)))]
    return f"say something about {topic}", "i like cats"


_SUM_MIN_TERMS, _SUM_MAX_TERMS = 2, 5


def _running_sum(rng: np.random.Generator) -> tuple[str, str]:
    terms = [int(x) for x in rng.integers(0, 10, size=int(rng.integers(_SUM_MIN_TERMS, _SUM_MAX_TERMS + 1)))]
    sums = np.cumsum(terms).tolist()
    return "sums " + " ".join(map(str, terms)), " ".join(map(str, sums))


_REPEAT_MIN_UNIT, _REPEAT_MAX_UNIT = 1, 3
_REPEAT_MIN_TIMES, _REPEAT_MAX_TIMES = 2, 8


def _repeat(rng: np.random.Generator) -> tuple[str, str]:
    unit = "".join(
        rng.choice(list(_LOWERCASE), size=int(rng.integers(_REPEAT_MIN_UNIT, _REPEAT_MAX_UNIT + 1)))
    )
    times = int(rng.integers(_REPEAT_MIN_TIMES, _REPEAT_MAX_TIMES + 1))
    return f"repeat {unit} {times} times", unit * times


def _lengths(alphabet: int, low: int, high: int) -> int:
    return sum(alphabet**length for length in range(low, high + 1))


_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[a-z]+")

MOCK_TASKS: dict[str, MockTask] = {
    task.name: task
    for task in (
        MockTask("addition_easy", _addition(9), 10 * 10, _DIGITS, "easy", description="a+b, a,b in 0..9"),
        MockTask(
            "addition_medium", _addition(99), 100 * 100, _DIGITS, "medium", description="a+b, a,b in 0..99"
        ),
        MockTask(
            "addition_hard", _addition(999), 1000 * 1000, _DIGITS, "hard", description="a+b, a,b in 0..999"
        ),
        MockTask("comparison", _comparison, 100 * 99, _DIGITS, description="the larger of two numbers 0..99"),
        MockTask(
            "opposites", _opposites, len(_OPPOSITE_WORDS), _WORD, description="antonym of a common word"
        ),
        MockTask(
            "counting",
            _counting,
            len(_COUNT_ALPHABET) * _lengths(len(_COUNT_ALPHABET), _COUNT_MIN_LEN, _COUNT_MAX_LEN),
            _DIGITS,
            description="how often a letter occurs in a short string",
        ),
        MockTask(
            "reverse",
            _reverse,
            _lengths(26, _REVERSE_MIN_LEN, _REVERSE_MAX_LEN),
            _WORD,
            description="a short lowercase string reversed",
        ),
        MockTask(
            "cats",
            _cats,
            len(_CAT_TOPICS),
            re.compile(r".+", re.DOTALL),
            needs_correctness=False,
            description="any response mentioning cats is rewarded (smoke test)",
        ),
        MockTask(
            "running_sum",
            _running_sum,
            _lengths(10, _SUM_MIN_TERMS, _SUM_MAX_TERMS),
            re.compile(r"\d+( \d+)*"),
            description="prefix sums of 2..5 digits (answer length grows with the input)",
        ),
        MockTask(
            "repeat",
            _repeat,
            _lengths(26, _REPEAT_MIN_UNIT, _REPEAT_MAX_UNIT) * (_REPEAT_MAX_TIMES - _REPEAT_MIN_TIMES + 1),
            _WORD,
            description="a 1..3 letter unit repeated 2..8 times: correct answers are the long ones",
        ),
        MockTask(
            "chain",
            draw_chain,
            chain_space_size(),
            CHAIN_FORMAT,
            final_answer=chain_final_answer,
            level_of=chain_level,
            description="repeated addition worked step by step: 1..12 steps, answers of 11..99 characters",
        ),
    )
}
