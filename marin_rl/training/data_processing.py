"""From raw graded groups to what one optimizer step trains on: shaping, then advantages, then filtering.

`prepare_batch` is the one place the RL algorithm meets the data (the `loss:` section's consumer on the data
side; the loss itself is marin_rl.objectives.policy_loss). It runs on the trainer when a group is used, not when
it is sampled, so a group reused from the replay buffer (`rollout.replay.max_reuse > 1`) is prepared again with
the batch it lands in. Array names carry their shape: N groups, G responses per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marin_rl.objectives import (
    GroupAccounting,
    LossConfig,
    advantage_metrics,
    apply_overlong_penalty,
    batch_group_advantages,
    zero_variance_groups,
)
from marin_rl.rollouts import Rollout, RolloutGroup


@dataclass(frozen=True)
class PreparedBatch:
    groups: list[RolloutGroup]  # the kept groups, in the order they were drawn
    advantages_NG: np.ndarray  # float32, one row per kept group
    accounting: GroupAccounting  # kept / dropped groups and sampling rounds behind this batch
    metrics: dict[str, float]

    @property
    def rollouts(self) -> list[Rollout]:
        return [r for g in self.groups for r in g.rollouts]

    @property
    def advantages_B(self) -> np.ndarray:
        return self.advantages_NG.reshape(-1)


def response_lengths_NG(groups: list[RolloutGroup]) -> np.ndarray:
    """int32[N, G]: response tokens of each rollout."""
    return np.array([[len(r.response_tokens) for r in g.rollouts] for g in groups], dtype=np.int32)


def shaped_rewards_NG(groups: list[RolloutGroup], loss_cfg: LossConfig, max_new_tokens: int) -> np.ndarray:
    """float32[N, G]: r + overlong_penalty(|y|) when loss.overlong.penalty is on (DAPO sec. 3.4), else r."""
    rewards_NG = np.stack([g.rewards_G for g in groups])
    return np.asarray(
        apply_overlong_penalty(rewards_NG, response_lengths_NG(groups), max_new_tokens, loss_cfg.overlong),
        dtype=np.float32,
    )


def prepare_batch(
    groups: list[RolloutGroup], loss_cfg: LossConfig, max_new_tokens: int, target_groups: int, rounds: int = 1
) -> PreparedBatch:
    """Shape rewards, compute group advantages (loss.advantage), drop zero-variance groups (DAPO sec. 3.2) and keep
    at most `target_groups`; `rounds` is how many sampling rounds produced `groups` (dynamic sampling)."""
    if not groups:
        accounting = GroupAccounting(target_groups, rounds=rounds)
        return PreparedBatch([], np.zeros((0, 0), np.float32), accounting, accounting.metrics())
    rewards_NG = shaped_rewards_NG(groups, loss_cfg, max_new_tokens)
    advantages_NG = np.asarray(batch_group_advantages(rewards_NG, loss_cfg.advantage), dtype=np.float32)
    if loss_cfg.filter_zero_variance:
        zero_variance_N = np.asarray(zero_variance_groups(rewards_NG), dtype=bool)
    else:
        zero_variance_N = np.zeros(len(groups), dtype=bool)
    kept_N = np.flatnonzero(~zero_variance_N)[:target_groups]
    accounting = GroupAccounting(target_groups, rounds=rounds - 1).record(zero_variance_N)
    kept_advantages_NG = advantages_NG[kept_N]
    metrics = {**accounting.metrics(), "reward/shaped_mean": float(rewards_NG.mean())}
    if kept_N.size:
        metrics.update({k: float(v) for k, v in advantage_metrics(kept_advantages_NG).items()})
    return PreparedBatch([groups[i] for i in kept_N], kept_advantages_NG, accounting, metrics)
