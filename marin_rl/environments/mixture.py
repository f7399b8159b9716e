"""Several environments in one run: training prompts drawn by weight, evaluation and metrics per component."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from marin_rl.environments.base import Environment, Messages, Problem, RenderStyle, Score, _batch_defaults
from marin_rl.environments.config import RewardConfig


def allocate_counts(n: int, weights: Sequence[float], rng: np.random.Generator) -> list[int]:
    """Split n draws by weight: floor(n * w_i / sum w) each, the remainder to components drawn in proportion to
    their fractional parts (largest-remainder apportionment with seeded tie-breaking), so counts never stray
    more than one from their expectation."""
    shares = np.asarray(weights, dtype=float) * n / float(np.sum(weights))
    counts = np.floor(shares).astype(int)
    remainder = n - int(counts.sum())
    if remainder > 0:
        fractions = shares - counts
        chosen = rng.choice(len(counts), size=remainder, replace=False, p=fractions / fractions.sum())
        counts[chosen] += 1
    return counts.tolist()


class MixtureEnvironment(Environment):
    """Dispatches every call to the component named by `problem.env`; holds no reward settings of its own."""

    def __init__(self, name: str, components: Sequence[Environment], weights: Sequence[float], seed: int = 0):
        super().__init__(name, RewardConfig(), seed)
        if len(components) != len(weights) or not components:
            raise ValueError(
                f"need one weight per component, got {len(components)} components, {len(weights)} weights"
            )
        self._components = list(components)
        self.weights = [float(weight) for weight in weights]
        self._by_name = {component.name: component for component in self._components}
        if len(self._by_name) != len(self._components):
            raise ValueError(f"component names must be distinct: {[c.name for c in self._components]}")

    @property
    def components(self) -> list[Environment]:
        return list(self._components)

    def component(self, problem: Problem) -> Environment:
        try:
            return self._by_name[problem.env]
        except KeyError:
            raise ValueError(
                f"problem {problem.id} comes from {problem.env!r}, not one of {sorted(self._by_name)}"
            ) from None

    def sample(self, n: int, rng: np.random.Generator | None = None) -> list[Problem]:
        rng = self._rng if rng is None else rng
        counts = allocate_counts(n, self.weights, rng)
        problems = [
            p
            for component, count in zip(self._components, counts, strict=True)
            for p in component.sample(count, rng)
        ]
        return [problems[i] for i in rng.permutation(len(problems))]

    def eval_problems(self, n: int | None = None) -> list[Problem]:
        """The first `n` held-out problems OF EACH component (so every environment gets a usable estimate)."""
        return [problem for component in self._components for problem in component.eval_problems(n)]

    def render(self, problem: Problem, style: RenderStyle = "plain") -> str | Messages:
        return self.component(problem).render(problem, style)

    def reference_response(self, problem: Problem) -> str:
        return self.component(problem).reference_response(problem)

    def judge(self, problem: Problem, response: str) -> tuple[bool, bool, str | None]:
        return self.component(problem).judge(problem, response)

    def score(self, problem: Problem, response: str, truncated: bool = False) -> Score:
        return self.component(problem).score(problem, response, truncated)

    def score_batch(
        self,
        problems: Sequence[Problem],
        responses: Sequence[str],
        truncated: Sequence[bool] | None = None,
    ) -> list[Score]:
        truncated = _batch_defaults(problems, responses, truncated)
        scores: list[Score | None] = [None] * len(problems)
        for component in self._components:
            indices = [i for i, problem in enumerate(problems) if self.component(problem) is component]
            if not indices:
                continue
            graded = component.score_batch(
                [problems[i] for i in indices],
                [responses[i] for i in indices],
                [truncated[i] for i in indices],
            )
            for index, score in zip(indices, graded, strict=True):
                scores[index] = score
        return scores  # type: ignore[return-value]

    def grading_pools(self) -> list:
        """Each distinct pool once (components of one run share a pool)."""
        pools = {id(pool): pool for component in self._components for pool in component.grading_pools()}
        return list(pools.values())

    def close(self) -> None:
        for component in self._components:
            component.close()
