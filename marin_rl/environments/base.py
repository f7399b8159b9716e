"""The environment interface: sample prompts, render them for a model, grade responses into rewards."""

from __future__ import annotations

import abc
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from marin_rl.environments.config import RewardConfig
from marin_rl.environments.rewards import combine_reward

RenderStyle = Literal["plain", "chat"]
RENDER_STYLES = ("plain", "chat")
Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Problem:
    id: str  # unique within its environment, stable across runs
    env: str  # name of the environment (component) it came from
    question: str  # the task text, before rendering
    gold: str  # what the grader compares against
    level: str | None = None  # difficulty label for per-level metrics, where the data has one
    reference: str | None = None  # a correct full response (SFT warm-starts, synthetic data); None if unknown


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool
    format_ok: bool  # the response has the expected answer format (a box, a number, a label)
    truncated: bool  # the sampler stopped it at max_new_tokens
    extracted: str | None  # the answer the grader read from the response (None: found none)


def stable_fraction(*parts: object) -> float:
    """A number in [0, 1) fixed by `parts` (sha1, so identical across processes and Python versions)."""
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def fill_template(template: str, **fields: str) -> str:
    """Replace `{name}` placeholders in one pass; other braces (`\\boxed{}`) stay as they are, unlike str.format."""
    if not fields:
        return template
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in fields))
    return pattern.sub(lambda match: fields[match.group(0)[1:-1]], template)


def draw_without_replacement(items: Sequence[Problem], n: int, rng: np.random.Generator) -> list[Problem]:
    """`n` items in random order, repeating one only after all were used (batches larger than the data)."""
    rounds = -(-n // len(items)) if n > 0 else 0
    indices = [int(i) for _ in range(rounds) for i in rng.permutation(len(items))][:n]
    return [items[i] for i in indices]


def check_style(style: str) -> None:
    if style not in RENDER_STYLES:
        raise ValueError(f"render style must be one of {list(RENDER_STYLES)}, got {style!r}")


def first_problems(problems: Sequence[Problem], n: int | None) -> list[Problem]:
    """The first `n` problems in their fixed order (all when None): how every env serves its held-out set."""
    return list(problems if n is None else problems[:n])


def render_question(question: str, plain_template: str, chat_template: str, style: RenderStyle) -> str | Messages:
    """The plain prompt, or one user message, filled from the env's templates."""
    check_style(style)
    if style == "plain":
        return fill_template(plain_template, question=question)
    return [{"role": "user", "content": fill_template(chat_template, question=question)}]


class Environment(abc.ABC):
    """One task family. Knows nothing about models, Ray or the trainer."""

    name: str
    reward_config: RewardConfig

    def __init__(self, name: str, reward_config: RewardConfig, seed: int = 0) -> None:
        self.name = name
        self.reward_config = reward_config
        # Used when sample() gets no generator: reproducible from the run seed.
        self._rng = np.random.default_rng(seed)

    @property
    def components(self) -> list[Environment]:
        """The environments metrics are reported for (just this one; a mixture lists its parts)."""
        return [self]

    @abc.abstractmethod
    def sample(self, n: int, rng: np.random.Generator | None = None) -> list[Problem]:
        """`n` training problems (never from the held-out set where the data allows)."""

    @abc.abstractmethod
    def eval_problems(self, n: int | None = None) -> list[Problem]:
        """The first `n` held-out problems (all when None), in a fixed order: the same on every call and run."""

    @abc.abstractmethod
    def render(self, problem: Problem, style: RenderStyle = "plain") -> str | Messages:
        """Plain text for a base / tiny model, or chat messages (the model code applies the chat template)."""

    def reference_response(self, problem: Problem) -> str:
        if problem.reference is None:
            raise ValueError(f"{self.name}: problem {problem.id} has no reference response")
        return problem.reference

    @abc.abstractmethod
    def judge(self, problem: Problem, response: str) -> tuple[bool, bool, str | None]:
        """(correct, format_ok, extracted) for one response, graded in this process."""

    def score(self, problem: Problem, response: str, truncated: bool = False) -> Score:
        """Grade one response."""
        correct, format_ok, extracted = self.judge(problem, response)
        return self._make_score(correct, format_ok, extracted, truncated)

    def score_batch(
        self,
        problems: Sequence[Problem],
        responses: Sequence[str],
        truncated: Sequence[bool] | None = None,
    ) -> list[Score]:
        """Grade a batch (data environments override this to use the grading process pool)."""
        truncated = _batch_defaults(problems, responses, truncated)
        return [
            self.score(problem, response, flag)
            for problem, response, flag in zip(problems, responses, truncated, strict=True)
        ]

    def _make_score(
        self,
        correct: bool,
        format_ok: bool,
        extracted: str | None,
        truncated: bool,
    ) -> Score:
        reward = combine_reward(self.reward_config, correct, format_ok)
        return Score(reward, bool(correct), bool(format_ok), bool(truncated), extracted)

    def grading_pools(self) -> list:
        """The grading process pools behind this environment (none: it grades in this process)."""
        return []

    def close(self) -> None:
        """Release resources (grading workers). Safe to call more than once."""
        return None


def _batch_defaults(
    problems: Sequence[Problem],
    responses: Sequence[str],
    truncated: Sequence[bool] | None,
) -> Sequence[bool]:
    if len(problems) != len(responses):
        raise ValueError(f"got {len(problems)} problems but {len(responses)} responses")
    truncated = [False] * len(responses) if truncated is None else truncated
    if len(truncated) != len(responses):
        raise ValueError(f"truncated ({len(truncated)}) must match responses ({len(responses)})")
    return truncated
