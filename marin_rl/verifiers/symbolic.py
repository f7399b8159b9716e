"""Symbolic equivalence of MATH answers with math-verify. Runs inside grading worker processes only.

Untrusted text reaches sympy only through math-verify's LaTeX (ANTLR) parser. Its plain-expression extractor is
deliberately not used: it hands text to sympy's `parse_expr`, which calls `eval`. math-verify's own signal-based
timeouts are off (`None`): they only work in a main thread and cannot interrupt a long C-level big-integer power
anyway; the parent process enforces the deadline by killing the worker (see `pool.py`).
"""

from __future__ import annotations

import logging
from functools import lru_cache

from math_verify import LatexExtractionConfig, parse, verify

from marin_rl.verifiers.boxed import extract_last_boxed
from marin_rl.verifiers.normalize import math_strings_equal, numeric_verdict

# Without this, math-verify logs a warning on the first call because its internal timeouts are disabled (on purpose).
logging.getLogger("math_verify").setLevel(logging.ERROR)

_LATEX_ONLY = [LatexExtractionConfig(boxed_match_priority=0)]
# Answers repeat a lot (a gold is graded against every sample of its prompt; samples often agree).
_PARSE_CACHE_SIZE = 4096


@lru_cache(maxsize=_PARSE_CACHE_SIZE)
def _parse_answer(answer: str) -> tuple:
    """math-verify's parse of a bare answer (`\\frac{1}{2}`, `(1,2]`, `\\text{(C)}`), as a boxed LaTeX expression."""
    parsed = parse("\\boxed{" + answer + "}", extraction_config=_LATEX_ONLY, parsing_timeout=None)
    if not parsed:
        parsed = parse("$" + answer + "$", extraction_config=_LATEX_ONLY, parsing_timeout=None)
    return tuple(parsed)


def _strip_percent(answer: str) -> str:
    stripped = answer.strip()
    for suffix in ("\\%", "%"):
        if stripped.endswith(suffix):
            return stripped[: -len(suffix)].strip()
    return stripped


def symbolically_equivalent(predicted: str, gold: str) -> bool:
    """math-verify alone: parse both answers as LaTeX and verify in both directions (no string fast paths)."""
    gold_parsed, predicted_parsed = _parse_answer(gold), _parse_answer(predicted)
    if not gold_parsed or not predicted_parsed:
        return False
    # verify() is asymmetric (assignments such as `x=2` simplify on one side only); either direction counts.
    if verify(list(gold_parsed), list(predicted_parsed), timeout_seconds=None):
        return True
    return bool(verify(list(predicted_parsed), list(gold_parsed), timeout_seconds=None))


def math_answers_equivalent(predicted: str, gold: str) -> bool:
    """Whether two bare answers are equal: normalised spelling, exact numbers, then math-verify both ways."""
    if not predicted.strip():
        return False
    if math_strings_equal(predicted, gold):
        return True
    exact = numeric_verdict(predicted, gold)
    if exact is not None:
        return exact
    if symbolically_equivalent(predicted, gold):
        return True
    # `10\%` does not parse in math-verify; MATH graders accept the bare number for a percent answer and vice versa.
    predicted_bare, gold_bare = _strip_percent(predicted), _strip_percent(gold)
    if (predicted_bare, gold_bare) != (predicted.strip(), gold.strip()) and predicted_bare and gold_bare:
        return math_answers_equivalent(predicted_bare, gold_bare)
    return False


def grade_math_symbolic_only(response: str, gold: str) -> bool:
    """The last box against the gold through math-verify only (benchmarks and debugging of the symbolic path)."""
    predicted = extract_last_boxed(response)
    return bool(predicted and predicted.strip()) and symbolically_equivalent(predicted, gold)


def grade_math_unbounded(response: str, gold: str) -> bool:
    """`math_correct` without its timeout: the last `\\boxed{}` of `response` against `gold`. Worker-side only."""
    predicted = extract_last_boxed(response)
    if not predicted:
        return False
    return math_answers_equivalent(predicted, gold)
