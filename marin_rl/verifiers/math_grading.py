"""`math_correct`: the last `\\boxed{}` of a response against a MATH `answer`, bounded by a hard timeout."""

from __future__ import annotations

from marin_rl.verifiers.boxed import extract_last_boxed
from marin_rl.verifiers.normalize import math_strings_equal, numeric_verdict
from marin_rl.verifiers.pool import GradingPool, default_pool


def math_quick_verdict(response: str, gold: str) -> bool | None:
    """Decide the easy cases without sympy: no/empty/unbalanced box -> False; same normalised spelling -> True;
    two rational literals -> exact comparison (see `numeric_verdict`).

    None means "needs the symbolic check". Linear-time string work, safe to run in the caller's process.
    """
    predicted = extract_last_boxed(response)
    if not predicted or not predicted.strip():
        return False
    if math_strings_equal(predicted, gold):
        return True
    return numeric_verdict(predicted, gold)


def math_correct(response: str, gold: str, pool: GradingPool | None = None) -> bool:
    """True iff the LAST `\\boxed{...}` of `response` is mathematically equal to the MATH answer `gold`.

    Equality: normalised spelling, then math-verify (fractions vs decimals, `\\dfrac`, `\\left(`, degrees,
    `\\text{}`, intervals, tuples, symbolic equality) in both directions. The symbolic check runs in a worker
    process of `pool` (default: the shared pool sized to the machine) under its timeout; a timeout is False.
    """
    quick = math_quick_verdict(response, gold)
    if quick is not None:
        return quick
    return (pool or default_pool()).grade_one("math", response, gold)


def math_correct_many(responses: list[str], golds: list[str], pool: GradingPool | None = None) -> list[bool]:
    """`math_correct` over a batch: quick verdicts here, the rest in parallel in the pool (called only if needed;
    anything with GradingPool's grade_many works, e.g. a lazily started pool)."""
    verdicts = [math_quick_verdict(response, gold) for response, gold in zip(responses, golds, strict=True)]
    undecided = [index for index, verdict in enumerate(verdicts) if verdict is None]
    if undecided:
        graded = (pool or default_pool()).grade_many(
            "math", [responses[i] for i in undecided], [golds[i] for i in undecided]
        )
        for index, verdict in zip(undecided, graded, strict=True):
            verdicts[index] = verdict
    return [bool(verdict) for verdict in verdicts]
