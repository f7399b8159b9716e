"""The grading pool handle of the environments, and the health of grading.

LazyGradingPool starts its process pool on first use, so runs that never need it never start worker processes; it
stands in for a GradingPool wherever one is accepted (same grade_many / grade_one). grading_counts sums what an
environment's pools graded, timed out or saw raise, and check_grader_errors stops a run whose grader raises too often
(env.grading.max_error_rate): the rollout worker, which owns the environment, runs that check after every round.
"""

from __future__ import annotations

import threading

from marin_rl.environments.config import GradingConfig
from marin_rl.verifiers import GradingPool

GRADING_COUNTS = ("graded", "timeouts", "crashes", "errors")


class GraderError(RuntimeError):
    """Too many responses made the grader raise: their 'incorrect' grades would be noise, not signal."""


def check_grader_errors(totals: dict[str, int], cfg: GradingConfig) -> None:
    """Raise GraderError once errors / graded > env.grading.max_error_rate (judged after min_graded_for_error_rate)."""
    if totals["graded"] >= cfg.min_graded_for_error_rate and totals["errors"] > cfg.max_error_rate * totals["graded"]:
        raise GraderError(
            f"the grader raised on {totals['errors']} of {totals['graded']} responses, more than "
            f"env.grading.max_error_rate={cfg.max_error_rate}; the first ones are in the rollout worker's log "
            "(with their response and gold). Fix the grader or the data, or raise the limit."
        )


def grading_counts(env) -> dict[str, int]:
    """Items graded / timed out / crashed / raising in the grader, summed over the environment's grading pools."""
    totals = dict.fromkeys(GRADING_COUNTS, 0)
    for pool in env.grading_pools():
        for key, value in pool.counts().items():
            totals[key] += value
    return totals


class LazyGradingPool:
    def __init__(self, config: GradingConfig) -> None:
        self.config = config
        self._pool: GradingPool | None = None
        self._lock = threading.Lock()

    def get(self) -> GradingPool:
        with self._lock:
            if self._pool is None:
                self._pool = GradingPool(
                    max_workers=self.config.workers,
                    timeout_s=self.config.timeout_s,
                    memory_limit_mb=self.config.memory_limit_mb,
                )
            return self._pool

    def grade_many(self, kind: str, responses: list[str], golds: list[str]) -> list[bool]:
        """GradingPool.grade_many, starting the pool on the first call."""
        return self.get().grade_many(kind, responses, golds)

    def grade_one(self, kind: str, response: str, gold: str) -> bool:
        return self.get().grade_one(kind, response, gold)

    def counts(self) -> dict[str, int]:
        """GradingPool.counts, all zero while the pool has not started."""
        with self._lock:
            pool = self._pool
        return pool.counts() if pool is not None else dict.fromkeys(GRADING_COUNTS, 0)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
