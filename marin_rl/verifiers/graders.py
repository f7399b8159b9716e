"""The graders a worker process can run, by kind. Imported (and warmed up) inside grading workers."""

from __future__ import annotations

from collections.abc import Callable

from marin_rl.verifiers.gsm8k import gsm8k_correct
from marin_rl.verifiers.symbolic import grade_math_symbolic_only, grade_math_unbounded

GRADERS: dict[str, Callable[[str, str], bool]] = {
    "math": grade_math_unbounded,
    "gsm8k": gsm8k_correct,
    "math_symbolic": grade_math_symbolic_only,  # math-verify without the fast paths (benchmarks, debugging)
}


def warm_up() -> None:
    """Pay math-verify's first-call cost (~0.2 s: ANTLR parser set-up) before any deadline starts."""
    grade_math_unbounded("\\boxed{\\frac{1}{2}}", "0.5")


def grade(kind: str, response: str, gold: str) -> bool:
    """One verdict; any exception inside a grader (malformed LaTeX, sympy errors, MemoryError) is 'incorrect'."""
    try:
        return bool(GRADERS[kind](response, gold))
    except Exception:
        return False
