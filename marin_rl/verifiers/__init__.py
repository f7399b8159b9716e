"""Answer verifiers for verifiable rewards: boxed-answer extraction, MATH and GSM8K grading, a safe grading pool.

Responses are untrusted: nothing here evals them, sympy only sees them through a LaTeX parser, and every symbolic
check runs in a worker process that is killed at its deadline (see `pool.py`).
"""

from marin_rl.verifiers.boxed import extract_after_last_hashes, extract_last_boxed, final_answer_candidate
from marin_rl.verifiers.gsm8k import gsm8k_correct, gsm8k_format_ok, gsm8k_gold_number
from marin_rl.verifiers.math_grading import math_correct, math_correct_many, math_quick_verdict
from marin_rl.verifiers.normalize import normalize_math_answer, parse_plain_number
from marin_rl.verifiers.pool import KINDS, GradingPool, GradingPoolError, available_cpus, default_pool


def grade_batch(
    kind: str, responses: list[str], golds: list[str], pool: GradingPool | None = None
) -> list[bool]:
    """Verdicts for a batch of one kind ("math" or "gsm8k"); math's easy cases are decided before the pool."""
    if kind == "math":
        return math_correct_many(responses, golds, pool)
    return (pool or default_pool()).grade_many(kind, responses, golds)


__all__ = [
    "KINDS",
    "GradingPool",
    "GradingPoolError",
    "available_cpus",
    "default_pool",
    "extract_after_last_hashes",
    "extract_last_boxed",
    "final_answer_candidate",
    "grade_batch",
    "gsm8k_correct",
    "gsm8k_format_ok",
    "gsm8k_gold_number",
    "math_correct",
    "math_correct_many",
    "math_quick_verdict",
    "normalize_math_answer",
    "parse_plain_number",
]
