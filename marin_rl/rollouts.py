"""Rollouts: the raw, graded samples a rollout worker ships to the trainer.

A `Rollout` is one sampled response with its per-token sampler log-probs, per-token policy versions and the
environment's grade (reward and its components). A `RolloutGroup` is the G responses to one prompt. Nothing here
is shaped, normalised or filtered: reward shaping, advantages and filtering are the trainer's
(`marin_rl.training.data_processing.prepare_batch`), computed when a group is used, so a group reused from the
replay buffer or a batch-level normalisation sees the same raw data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rollout:
    problem_id: str
    env: str
    prompt_tokens: np.ndarray  # int32[P]
    response_tokens: np.ndarray  # int32[R], EOS included when the response stopped
    sampler_logp: np.ndarray  # float32[R], log-prob of each response token under the sampling distribution
    versions: np.ndarray  # int32[R], policy version that produced each token
    reward: float  # the environment's reward, unshaped
    correct: bool  # reward component: the grader's verdict
    format_ok: bool  # reward component: the answer had the expected format (a box, a number, a label)
    truncated: bool  # hit max_new_tokens (finish_reason == "length")

    @property
    def min_version(self) -> int:
        return int(self.versions.min()) if len(self.versions) else -1

    @property
    def max_version(self) -> int:
        return int(self.versions.max()) if len(self.versions) else -1

    @property
    def spans_versions(self) -> bool:
        """True when weights were swapped while this response was being generated (in-flight update)."""
        return self.min_version != self.max_version


@dataclass(frozen=True)
class RolloutGroup:
    rollouts: tuple[Rollout, ...]

    @property
    def env(self) -> str:
        return self.rollouts[0].env

    @property
    def rewards_G(self) -> np.ndarray:
        return np.array([r.reward for r in self.rollouts], dtype=np.float32)

    @property
    def min_version(self) -> int:
        return min(r.min_version for r in self.rollouts)

    def __len__(self) -> int:
        return len(self.rollouts)


def staleness(group: RolloutGroup, trainer_version: int) -> int:
    """Trainer steps between the oldest token of the group and the weights about to be updated."""
    return trainer_version - group.min_version
