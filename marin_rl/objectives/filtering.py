"""Which responses count: zero-variance group filtering, DAPO dynamic-sampling accounting, overlong filtering.

A group of responses to one prompt whose rewards are all equal (all right or all wrong) has zero group-relative
advantage: it adds no gradient, only dilutes the batch and its normalizer. DAPO drops such groups and, with dynamic
sampling, keeps sampling prompts until the batch is full again (Yu et al. 2025, DAPO sec. 3.2). Overlong filtering
masks out the answers that hit the length cap, whose reward says nothing about the answer (DAPO sec. 3.4).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from marin_rl.objectives.config import DynamicSamplingConfig
from marin_rl.objectives.xp import array_module, as_float


def zero_variance_groups(rewards) -> jax.Array:
    """[num_groups, G] rewards -> [num_groups] bool, True where all G rewards are equal (no signal; G=1 is True)."""
    rewards = array_module(rewards).asarray(rewards)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {rewards.shape}")
    return rewards.max(axis=-1) == rewards.min(axis=-1)


def mask_truncated(mask, truncated) -> jax.Array:
    """[B, T] mask with the rows of truncated answers ([B] bool, finish_reason=length) zeroed: overlong filtering."""
    xp = array_module(mask, truncated)
    mask = as_float(mask, xp)
    truncated = xp.asarray(truncated).astype(bool)
    if truncated.shape != mask.shape[:1]:
        raise ValueError(f"truncated must be [batch]={mask.shape[:1]}, got shape {truncated.shape}")
    return xp.where(truncated[:, None], 0.0, mask).astype(mask.dtype)


@dataclasses.dataclass(frozen=True)
class GroupAccounting:
    """Groups seen while one training batch is assembled under zero-variance filtering (immutable; `record` a round).

    target_groups: groups (prompts) one batch needs; kept/dropped: groups with / without reward variance so far;
    rounds: sampling rounds so far (the first round plus extra rounds of dynamic sampling).
    """

    target_groups: int
    kept_groups: int = 0
    dropped_groups: int = 0
    rounds: int = 0

    def __post_init__(self):
        if self.target_groups <= 0:
            raise ValueError(f"target_groups={self.target_groups} must be > 0")

    def record(self, zero_variance) -> GroupAccounting:
        """Account for one sampling round; zero_variance is that round's zero_variance_groups mask."""
        zero_variance = np.asarray(zero_variance, dtype=bool).reshape(-1)
        dropped = int(zero_variance.sum())
        return dataclasses.replace(
            self,
            kept_groups=self.kept_groups + zero_variance.size - dropped,
            dropped_groups=self.dropped_groups + dropped,
            rounds=self.rounds + 1,
        )

    @property
    def missing_groups(self) -> int:
        return max(self.target_groups - self.kept_groups, 0)

    @property
    def dropped_fraction(self) -> float:
        seen = self.kept_groups + self.dropped_groups
        return self.dropped_groups / seen if seen else 0.0

    def needs_more(self, cfg: DynamicSamplingConfig) -> bool:
        """True while dynamic sampling is on, the batch is short and extra rounds are left (1 + max_extra_rounds)."""
        return cfg.enabled and self.missing_groups > 0 and self.rounds < 1 + cfg.max_extra_rounds

    def prompts_for_next_round(self) -> int:
        """Prompts to sample next: missing / observed keep rate, at least the missing count, at most one full batch."""
        missing = self.missing_groups
        if missing == 0:
            return 0
        seen = self.kept_groups + self.dropped_groups
        if self.kept_groups == 0 or seen == 0:
            return self.target_groups  # no keep rate yet: a full round, as DAPO does
        estimate = math.ceil(missing * seen / self.kept_groups)
        return min(max(estimate, missing), self.target_groups)

    def metrics(self) -> dict[str, float]:
        return {
            "filter/zero_variance_frac": self.dropped_fraction,
            "filter/kept_groups": float(self.kept_groups),
            "filter/dropped_groups": float(self.dropped_groups),
            "filter/sampling_rounds": float(self.rounds),
            "filter/batch_fill": min(self.kept_groups, self.target_groups) / self.target_groups,
        }
