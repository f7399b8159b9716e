"""Grader audit: grade labelled (response, gold, is_correct) rows and report how often the grader is wrong.

    python -m marin_rl.verifiers.audit --env math500 --labels FILE.jsonl [--max-fp-rate 0.01 --max-fn-rate 0.02]

Each row is graded alone, the way the environment grades a response (math500: the quick in-process verdict, else
math-verify in a grading worker under the timeout; gsm8k: the GSM8K grader in a worker), and timed. Printed:
the confusion matrix, the false-positive rate (graded correct among rows labelled incorrect) and false-negative
rate (graded incorrect among rows labelled correct) with Wilson 95% intervals, both per category, every
misgraded row, the slowest rows and every timeout. The exit status is 1 when a rate is above its threshold
(--max-fp-rate, default 0.01; --max-fn-rate, default 0.02). Build a labelled set with `python -m marin_rl.verifiers.audit_set`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from marin_rl.environments.config import GradingConfig
from marin_rl.environments.data import read_jsonl
from marin_rl.runlog.eval_summary import wilson_interval
from marin_rl.verifiers.math_grading import math_correct
from marin_rl.verifiers.pool import GradingPool

GRADING_KINDS = {"math500": "math", "gsm8k": "gsm8k"}  # environment kind -> grader kind (as the envs use them)
DEFAULT_SLOWEST = 10
# The gate `make test` and `make audit` hold the graders to on the built sets (docs/grader_audit.md). A false
# positive is reward a policy can learn to farm, so it gets the stricter limit.
MAX_FP_RATE = 0.01
MAX_FN_RATE = 0.02
SHOWN_RESPONSE_CHARS = 90


@dataclass(frozen=True)
class Graded:
    id: str
    category: str
    gold: str
    response: str
    is_correct: bool  # the label
    graded_correct: bool  # the grader's verdict
    seconds: float
    timed_out: bool  # the grading worker passed its deadline (the verdict is then False)


@dataclass(frozen=True)
class Rate:
    """k of n rows with a Wilson 95% interval; NaN rate when n = 0."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.value, self.n) if self.n else (float("nan"), float("nan"))

    def __str__(self) -> str:
        if not self.n:
            return "-"
        low, high = self.interval
        return f"{self.value:.3f} [{low:.3f}, {high:.3f}] ({self.k}/{self.n})"


def read_labels(path: str | Path) -> list[dict]:
    """Rows with string `response` and `gold` and a boolean `is_correct`; a bad line raises naming `path:line`."""
    rows = []
    for line_number, item in read_jsonl(path, required=("gold",)):
        if not isinstance(item.get("response"), str) or not isinstance(item.get("is_correct"), bool):
            raise ValueError(f"{path}:{line_number}: needs a string `response` and a boolean `is_correct`")
        rows.append({"id": str(item.get("id", f"line-{line_number}")), "category": str(item.get("category", "-")),
                     **{k: item[k] for k in ("response", "gold", "is_correct")}})
    return rows


def grade_rows(rows: Sequence[dict], env: str, pool: GradingPool) -> list[Graded]:
    """Grade each row on its own (so its time and any timeout belong to it) through the environment's grader."""
    kind = GRADING_KINDS[env]
    graded = []
    for item in rows:
        timeouts_before = pool.timeouts
        start = time.perf_counter()
        if kind == "math":
            verdict = math_correct(item["response"], item["gold"], pool)
        else:
            verdict = pool.grade_one(kind, item["response"], item["gold"])
        seconds = time.perf_counter() - start
        graded.append(Graded(item["id"], item["category"], item["gold"], item["response"], item["is_correct"],
                             bool(verdict), seconds, pool.timeouts > timeouts_before))
    return graded


def confusion(graded: Sequence[Graded]) -> dict[str, int]:
    """Counts of (label, verdict): tp = labelled and graded correct, fp = labelled incorrect but graded correct..."""
    counts = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    for g in graded:
        key = ("t" if g.is_correct == g.graded_correct else "f") + ("p" if g.graded_correct else "n")
        counts[key] += 1
    return counts


def false_positive_rate(graded: Sequence[Graded]) -> Rate:
    """Share of rows labelled incorrect that the grader accepts: fp / (fp + tn)."""
    negatives = [g for g in graded if not g.is_correct]
    return Rate(sum(g.graded_correct for g in negatives), len(negatives))


def false_negative_rate(graded: Sequence[Graded]) -> Rate:
    """Share of rows labelled correct that the grader rejects: fn / (fn + tp)."""
    positives = [g for g in graded if g.is_correct]
    return Rate(sum(not g.graded_correct for g in positives), len(positives))


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN_RESPONSE_CHARS else flat[: SHOWN_RESPONSE_CHARS - 3] + "..."


def format_audit(graded: Sequence[Graded], env: str, labels: str, timeout_s: float, slowest: int) -> str:
    counts = confusion(graded)
    lines = [
        f"grader audit: env={env}, {len(graded)} labelled rows from {labels}, timeout {timeout_s:g} s per row",
        "",
        "                  graded correct  graded incorrect",
        f"labelled correct    {counts['tp']:>12}  {counts['fn']:>16}",
        f"labelled incorrect  {counts['fp']:>12}  {counts['tn']:>16}",
        "",
        f"false-positive rate: {false_positive_rate(graded)}",
        f"false-negative rate: {false_negative_rate(graded)}",
        "",
        "by category (FP rate among its incorrect rows, FN rate among its correct rows):",
    ]
    for category in sorted({g.category for g in graded}):
        members = [g for g in graded if g.category == category]
        lines.append(f"  {category:<16} rows {len(members):>4}  FP {false_positive_rate(members)}  "
                     f"FN {false_negative_rate(members)}")
    wrong = [g for g in graded if g.is_correct != g.graded_correct]
    lines += ["", f"misgraded rows ({len(wrong)}):"]
    lines += [f"  {'FP' if g.graded_correct else 'FN'} {g.id}: gold {g.gold!r}, response {_short(g.response)!r}"
              for g in wrong] or ["  none"]
    lines += ["", f"slowest {min(slowest, len(graded))} rows:"]
    lines += [f"  {g.seconds:7.3f} s  {g.id}" for g in sorted(graded, key=lambda g: -g.seconds)[:slowest]]
    timeouts = [g for g in graded if g.timed_out]
    lines += ["", f"timeouts ({len(timeouts)}):"]
    lines += [f"  {g.id}: gold {g.gold!r}, response {_short(g.response)!r}" for g in timeouts] or ["  none"]
    total = sum(g.seconds for g in graded)
    lines += ["", f"grading time: {total:.1f} s in all, {total / max(len(graded), 1) * 1000:.1f} ms per row"]
    return "\n".join(lines)


def threshold_failures(graded: Sequence[Graded], max_fp_rate: float, max_fn_rate: float) -> list[str]:
    """A line per rate above its threshold (none when both hold)."""
    failures = []
    for name, rate, limit in (("false-positive", false_positive_rate(graded), max_fp_rate),
                              ("false-negative", false_negative_rate(graded), max_fn_rate)):
        if rate.n and rate.value > limit:
            failures.append(f"{name} rate {rate.value:.3f} is above the threshold {limit:g}")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    defaults = GradingConfig()
    parser = argparse.ArgumentParser(prog="python -m marin_rl.verifiers.audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(GRADING_KINDS), required=True, help="whose grader to audit")
    parser.add_argument("--labels", required=True, help="JSONL with response, gold, is_correct [, id, category]")
    parser.add_argument("--timeout-s", type=float, default=defaults.timeout_s,
                        help="per-row grading timeout, as env.grading.timeout_s (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="grading worker processes (default: %(default)s)")
    parser.add_argument("--slowest", type=int, default=DEFAULT_SLOWEST, help="slowest rows to list")
    parser.add_argument("--max-fp-rate", type=float, default=MAX_FP_RATE,
                        help="exit 1 when the false-positive rate is above this (default: %(default)s)")
    parser.add_argument("--max-fn-rate", type=float, default=MAX_FN_RATE,
                        help="exit 1 when the false-negative rate is above this (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write every graded row to this JSONL")
    args = parser.parse_args(argv)
    try:
        rows = read_labels(args.labels)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    with GradingPool(args.workers, timeout_s=args.timeout_s, memory_limit_mb=defaults.memory_limit_mb) as pool:
        pool.grade_many(GRADING_KINDS[args.env], ["\\boxed{1}"] * args.workers, ["1"] * args.workers)  # start
        graded = grade_rows(rows, args.env, pool)  # the workers' start-up (~1 s each) is not timed
    print(format_audit(graded, args.env, args.labels, args.timeout_s, args.slowest))
    if args.json is not None:
        args.json.write_text("".join(json.dumps(asdict(g)) + "\n" for g in graded), encoding="utf-8")
    failures = threshold_failures(graded, args.max_fp_rate, args.max_fn_rate)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
