"""The graders a worker process can run, by kind. Imported (and warmed up) inside grading workers."""

from __future__ import annotations

from collections.abc import Callable

from marin_rl.verifiers.gsm8k import gsm8k_correct
from marin_rl.verifiers.symbolic import grade_math_symbolic_only, grade_math_unbounded

MAX_ERROR_TEXT = 300  # characters of an exception message sent back to the parent

GRADERS: dict[str, Callable[[str, str], bool]] = {
    "math": grade_math_unbounded,
    "gsm8k": gsm8k_correct,
    "math_symbolic": grade_math_symbolic_only,  # math-verify without the fast paths (benchmarks, debugging)
}


def warm_up() -> None:
    """Pay math-verify's first-call cost (~0.2 s: ANTLR parser set-up) before any deadline starts."""
    grade_math_unbounded("\\boxed{\\frac{1}{2}}", "0.5")


def grade(kind: str, response: str, gold: str) -> tuple[bool, str | None]:
    """(verdict, error): an exception inside a grader (malformed LaTeX, sympy errors, MemoryError) is 'incorrect',
    and its "Type: message" comes back so the caller can count and report it instead of hiding it."""
    try:
        return bool(GRADERS[kind](response, gold)), None
    except Exception as err:
        return False, f"{type(err).__name__}: {err}"[:MAX_ERROR_TEXT]
