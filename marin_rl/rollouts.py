"""Rollouts: what a rollout worker ships to the trainer, and how a batch of them becomes a training batch.

A `Rollout` is one sampled response with its per-token sampler log-probs and per-token policy versions; a
`RolloutGroup` is the n responses to one prompt, with the group-relative advantages already computed (the
advantage of a response only makes sense inside its group, so it is fixed where the group is complete).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marin_rl.objectives import group_advantages


@dataclass(frozen=True)
class Rollout:
    problem_id: str
    env: str
    prompt_tokens: np.ndarray  # int32[P]
    response_tokens: np.ndarray  # int32[R], EOS included when the response stopped
    sampler_logp: np.ndarray  # float32[R], log-prob of each response token under the sampling distribution
    versions: np.ndarray  # int32[R], policy version that produced each token
    reward: float
    correct: bool
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
    advantages: np.ndarray  # float32[G]

    @property
    def env(self) -> str:
        return self.rollouts[0].env

    @property
    def rewards(self) -> np.ndarray:
        return np.array([r.reward for r in self.rollouts], dtype=np.float32)

    @property
    def min_version(self) -> int:
        return min(r.min_version for r in self.rollouts)

    @property
    def is_zero_variance(self) -> bool:
        """Every response got the same reward: all advantages are 0 and the group carries no gradient."""
        rewards = self.rewards
        return bool(np.all(rewards == rewards[0]))

    def __len__(self) -> int:
        return len(self.rollouts)


def make_group(rollouts: list[Rollout], estimator: str) -> RolloutGroup:
    rewards = np.array([r.reward for r in rollouts], dtype=np.float32)
    advantages = np.asarray(group_advantages(rewards, estimator), dtype=np.float32)
    return RolloutGroup(tuple(rollouts), advantages)


def staleness(group: RolloutGroup, trainer_version: int) -> int:
    """Trainer steps between the oldest token of the group and the weights about to be updated."""
    return trainer_version - group.min_version


@dataclass(frozen=True)
class PackedBatch:
    """A training batch as dense right-padded arrays (see marin_rl/training/logprobs.py for the layout)."""

    tokens: np.ndarray  # int32[B, S]: prompt + response, right-padded
    loss_mask: np.ndarray  # float32[B, S]: 1 on response tokens that count
    advantages: np.ndarray  # float32[B]
    sampler_logp: np.ndarray  # float32[B, S]: aligned with tokens (0 off the response)
    truncated: np.ndarray  # bool[B]


def pack_groups(
    groups: list[RolloutGroup], seq_len: int, pad_id: int, mask_truncated: bool = False
) -> PackedBatch:
    """Lay each response after its prompt in a row of `seq_len`; with `mask_truncated`, truncated rows get no loss."""
    rollouts = [r for g in groups for r in g.rollouts]
    advantages = np.concatenate([g.advantages for g in groups]).astype(np.float32)
    B = len(rollouts)
    tokens = np.full((B, seq_len), pad_id, dtype=np.int32)
    mask = np.zeros((B, seq_len), dtype=np.float32)
    logp = np.zeros((B, seq_len), dtype=np.float32)
    truncated = np.zeros(B, dtype=bool)
    for i, r in enumerate(rollouts):
        p, n = len(r.prompt_tokens), len(r.response_tokens)
        if p + n > seq_len:
            raise ValueError(
                f"rollout {r.problem_id} has {p} prompt + {n} response tokens > model.max_seq_len={seq_len}; "
                "shorten the prompt or lower sampler.max_new_tokens"
            )
        tokens[i, :p] = r.prompt_tokens
        tokens[i, p : p + n] = r.response_tokens
        logp[i, p : p + n] = r.sampler_logp
        truncated[i] = r.truncated
        if not (mask_truncated and r.truncated):
            mask[i, p : p + n] = 1.0
    return PackedBatch(tokens, mask, advantages, logp, truncated)
