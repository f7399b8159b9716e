"""Grading throughput on the MATH-500 reference solutions (and GSM8K references), in responses per second.

    python bench/bench_grading.py --data-dir ../shared/data --workers 2

Three MATH numbers are printed: the reference solutions as graded in training (the typical case: most boxed
answers match the gold's spelling or value and never reach sympy), the same solutions through math-verify only
(kind "math_symbolic": every item parsed and verified symbolically), and perturbed (wrong) answers, whose
non-numeric ones reach math-verify, which tries every comparison before saying no. Pool start-up is excluded
(it is paid once per run) and reported separately.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

from marin_rl.verifiers import GradingPool, extract_last_boxed, grade_batch


def _load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def _replace_last_box(solution: str, content: str) -> str:
    start = solution.rfind("\\boxed")
    old = extract_last_boxed(solution)
    end = solution.index(old, start) + len(old) + 1
    return solution[:start] + "\\boxed{" + content + "}" + solution[end:]


def _perturb(answer: str) -> str:
    match = re.search(r"\d+", answer)
    if match is None:
        return answer + "+1"
    return answer[: match.start()] + str(int(match.group()) + 1) + answer[match.end() :]


def _rate(
    label: str, kind: str, responses: list[str], golds: list[str], pool: GradingPool, expect: bool
) -> float:
    started = time.perf_counter()
    verdicts = grade_batch(kind, responses, golds, pool)
    elapsed = time.perf_counter() - started
    agree = sum(v is expect for v in verdicts)
    rate = len(responses) / elapsed
    print(
        f"{label:<44} {len(responses):>5} in {elapsed:6.2f}s = {rate:8.1f} responses/s  ({agree} graded {expect})"
    )
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_data = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data-dir", type=Path, default=default_data, help="folder with math500/ and gsm8k/")
    parser.add_argument("--workers", type=int, default=2, help="grading processes (default 2)")
    parser.add_argument("--timeout-s", type=float, default=5.0, help="per-response grading timeout")
    args = parser.parse_args(argv)

    math_rows = _load(args.data_dir / "math500" / "test.jsonl")
    gsm8k_rows = _load(args.data_dir / "gsm8k" / "test.jsonl")
    golds = [row["answer"] for row in math_rows]
    started = time.perf_counter()
    with GradingPool(max_workers=args.workers, timeout_s=args.timeout_s) as pool:
        pool.grade_many("math", ["\\boxed{1}"], ["1"])  # start and warm the workers
        print(f"pool start-up ({args.workers} workers): {time.perf_counter() - started:.2f}s")
        typical = _rate(
            "MATH-500 reference solutions", "math", [r["solution"] for r in math_rows], golds, pool, True
        )
        solutions = [r["solution"] for r in math_rows]
        _rate("MATH-500 references, math-verify path only", "math_symbolic", solutions, golds, pool, True)
        wrong = [_replace_last_box(r["solution"], _perturb(r["answer"])) for r in math_rows]
        _rate("MATH-500 perturbed (wrong) answers", "math", wrong, golds, pool, False)
        gsm8k_golds = [row["answer"].rsplit("####", 1)[1].strip() for row in gsm8k_rows]
        _rate(
            "GSM8K test reference answers",
            "gsm8k",
            [r["answer"] for r in gsm8k_rows],
            gsm8k_golds,
            pool,
            True,
        )
        print(f"timeouts: {pool.timeouts}, crashed workers: {pool.crashes}")
    print(f"RESULT math500_reference_responses_per_s={typical:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
