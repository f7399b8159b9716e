"""Data-backed environments: `math500` (MATH train -> MATH-500) and `gsm8k`, graded in the process pool."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from marin_rl.environments.base import (
    Environment,
    Messages,
    Problem,
    RenderStyle,
    Score,
    _batch_defaults,
    draw_without_replacement,
    first_problems,
    render_question,
)
from marin_rl.environments.config import Gsm8kComponentConfig, Math500ComponentConfig
from marin_rl.environments.data import GSM8K_FORMAT, MATH_FORMAT, Record, load_splits
from marin_rl.environments.grading import LazyGradingPool
from marin_rl.verifiers import extract_last_boxed, final_answer_candidate, gsm8k_format_ok, math_correct_many


def split_records(
    train: list[Record] | None, test: list[Record], eval_fraction: float, split_seed: int
) -> tuple[list[Record], list[Record]]:
    """(train, eval): the given train set and the test set in a seeded order, or, without a train set,
    a seeded disjoint split of the test set (eval gets round(eval_fraction * len(test)) problems)."""
    order = np.random.default_rng(split_seed).permutation(len(test))
    shuffled = [test[i] for i in order]
    if train is not None:
        return train, shuffled
    n_eval = min(len(test) - 1, max(1, round(eval_fraction * len(test))))
    return shuffled[n_eval:], shuffled[:n_eval]


class DatasetEnvironment(Environment):
    """Problems from a fixed dataset; training samples without replacement within a batch."""

    grading_kind: str

    def __init__(
        self,
        config: Math500ComponentConfig | Gsm8kComponentConfig,
        train: list[Record],
        evaluation: list[Record],
        pool: LazyGradingPool,
        seed: int = 0,
    ) -> None:
        super().__init__(config.resolved_name, config.reward, seed)
        if not train:
            raise ValueError(f"{self.name}: the training set is empty")
        if not evaluation:
            raise ValueError(f"{self.name}: the held-out set is empty")
        self.config = config
        self.pool = pool
        self._train = [self._problem(record) for record in train]
        limit = config.eval_size or len(evaluation)
        self._eval = [self._problem(record) for record in evaluation[:limit]]
        self.decontamination: dict[str, int] | None = None  # {"checked", "dropped"} once decontaminated

    def _problem(self, record: Record) -> Problem:
        return Problem(record.id, self.name, record.question, record.gold, record.level, record.reference)

    @property
    def train_size(self) -> int:
        return len(self._train)

    @property
    def training_problems(self) -> list[Problem]:
        return list(self._train)

    def replace_training_problems(self, problems: list[Problem]) -> None:
        """Train on `problems` from now on (decontamination drops the ones overlapping evaluation problems)."""
        if not problems:
            raise ValueError(f"{self.name}: the training set is empty")
        self._train = list(problems)

    def sample(self, n: int, rng: np.random.Generator | None = None) -> list[Problem]:
        rng = self._rng if rng is None else rng
        return draw_without_replacement(self._train, n, rng)

    def eval_problems(self, n: int | None = None) -> list[Problem]:
        return first_problems(self._eval, n)

    def render(self, problem: Problem, style: RenderStyle = "plain") -> str | Messages:
        return render_question(problem.question, self.config.plain_template, self.config.chat_template, style)

    def score_batch(
        self,
        problems: Sequence[Problem],
        responses: Sequence[str],
        truncated: Sequence[bool] | None = None,
    ) -> list[Score]:
        truncated = _batch_defaults(problems, responses, truncated)
        if not responses:
            return []
        verdicts = self.verdicts(list(responses), [p.gold for p in problems])
        scores = []
        for response, correct, flag in zip(responses, verdicts, truncated, strict=True):
            format_ok, extracted = self.answer_format(response)
            scores.append(self._make_score(correct, format_ok, extracted, flag))
        return scores

    def judge(self, problem: Problem, response: str) -> tuple[bool, bool, str | None]:
        format_ok, extracted = self.answer_format(response)
        return self.verdicts([response], [problem.gold])[0], format_ok, extracted

    def verdicts(self, responses: list[str], golds: list[str]) -> list[bool]:
        """Correctness through the grading pool (started on first need)."""
        return self.pool.get().grade_many(self.grading_kind, responses, golds)

    def answer_format(self, response: str) -> tuple[bool, str | None]:
        raise NotImplementedError

    def grading_pools(self) -> list:
        return [self.pool]

    def close(self) -> None:
        self.pool.close()


class Math500Environment(DatasetEnvironment):
    grading_kind = "math"

    def verdicts(self, responses: list[str], golds: list[str]) -> list[bool]:
        """Easy cases (no box, same spelling, plain numbers) in this process; the pool starts only for the rest."""
        return math_correct_many(responses, golds, self.pool)

    def answer_format(self, response: str) -> tuple[bool, str | None]:
        boxed = extract_last_boxed(response)
        return bool(boxed and boxed.strip()), boxed


class Gsm8kEnvironment(DatasetEnvironment):
    grading_kind = "gsm8k"

    def answer_format(self, response: str) -> tuple[bool, str | None]:
        return gsm8k_format_ok(response), final_answer_candidate(response)


def build_dataset_environment(
    config: Math500ComponentConfig | Gsm8kComponentConfig,
    data_dir: str | None,
    pool: LazyGradingPool,
    seed: int,
) -> DatasetEnvironment:
    """The math500 or gsm8k environment of a component: load (local or hub), split, wrap."""
    fmt, env_class = _DATASET_KINDS[config.kind]
    train, test = load_splits(
        fmt, data_dir, config.split_from_test, config.hub_test, config.hub_train, config.hub_timeout_s
    )
    train, evaluation = split_records(train, test, config.eval_fraction, config.split_seed)
    return env_class(config, train, evaluation, pool, seed)


_DATASET_KINDS = {"math500": (MATH_FORMAT, Math500Environment), "gsm8k": (GSM8K_FORMAT, Gsm8kEnvironment)}
