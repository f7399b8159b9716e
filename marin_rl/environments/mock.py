"""`mock` environments: one procedurally generated task (see mock_tasks.py), graded by exact match in-process."""

from __future__ import annotations

import numpy as np

from marin_rl.environments.base import (
    Environment,
    Messages,
    Problem,
    RenderStyle,
    first_problems,
    render_question,
    stable_fraction,
)
from marin_rl.environments.config import MockComponentConfig
from marin_rl.environments.mock_tasks import CAT_WORD, MOCK_TASKS

# Give up collecting distinct eval problems after this many draws per wanted problem (small spaces run dry).
_DRAWS_PER_EVAL_PROBLEM = 50


class MockEnvironment(Environment):
    def __init__(self, config: MockComponentConfig, seed: int = 0) -> None:
        super().__init__(config.resolved_name, config.reward, seed)
        self.config = config
        self.task = MOCK_TASKS[config.task]
        if config.eval_split == "auto":
            self.disjoint = self.task.space_size >= config.auto_disjoint_min_space
        else:
            self.disjoint = config.eval_split == "disjoint"
        self._eval = self._collect_eval_problems()

    def _held_out(self, question: str) -> bool:
        return self.disjoint and stable_fraction(self.task.name, question, self.config.split_seed) < (
            self.config.eval_fraction
        )

    def _problem(self, question: str, answer: str) -> Problem:
        final = self.task.final_answer
        return Problem(
            id=f"{self.task.name}:{question}",
            env=self.name,
            question=question,
            gold=final(answer) if final else answer,
            level=self.task.level_of(answer) if self.task.level_of else self.task.level,
            reference=answer,
        )

    def _collect_eval_problems(self) -> list[Problem]:
        """Distinct held-out problems in a fixed order: seeded draws that fall in the eval hash bucket."""
        wanted = min(self.config.eval_size or self.task.space_size, self.task.space_size)
        rng = np.random.default_rng(self.config.split_seed)
        seen: dict[str, Problem] = {}
        for _ in range(_DRAWS_PER_EVAL_PROBLEM * wanted):
            question, answer = self.task.draw(rng)
            if question not in seen and (not self.disjoint or self._held_out(question)):
                seen[question] = self._problem(question, answer)
                if len(seen) >= wanted:
                    break
        return list(seen.values())

    def sample(self, n: int, rng: np.random.Generator | None = None) -> list[Problem]:
        rng = self._rng if rng is None else rng
        problems: list[Problem] = []
        while len(problems) < n:
            question, answer = self.task.draw(rng)
            if not self._held_out(question):
                problems.append(self._problem(question, answer))
        return problems

    def eval_problems(self, n: int | None = None) -> list[Problem]:
        return first_problems(self._eval, n)

    def render(self, problem: Problem, style: RenderStyle = "plain") -> str | Messages:
        return render_question(problem.question, self.config.plain_template, self.config.chat_template, style)

    def judge(self, problem: Problem, response: str) -> tuple[bool, bool, str | None]:
        answer = response.strip()
        if not self.task.needs_correctness:
            return CAT_WORD in answer.lower(), bool(answer), answer or None
        format_ok = self.task.answer_format.fullmatch(answer) is not None
        if self.task.final_answer is not None:
            extracted = self.task.final_answer(answer)
            return extracted == problem.gold, format_ok, extracted
        return answer == problem.gold, format_ok, answer or None
