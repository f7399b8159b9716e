"""Group-relative advantages: one scalar per response, from the rewards of the G responses to the same prompt.

Estimators (`loss.advantage`):
    grpo     A_i = (r_i - mean(r)) / (std_unbiased(r) + eps)      (Shao et al. 2024, DeepSeekMath, sec. 4.1.2)
    dr_grpo  A_i = r_i - mean(r)                                  (Liu et al. 2025, "Understanding R1-Zero-Like
                                                                   Training": Dr. GRPO drops the std division)
    rloo     A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean)  (Ahmadian et al. 2024, "Back to Basics";
                                                                   Kool et al. 2019, "Buy 4 REINFORCE Samples")

A group whose rewards are all equal carries no learning signal and gets exactly zero advantages (not a rounding
residue of the mean), and so does a group of one response.
"""

from __future__ import annotations

from typing import get_args

import jax

from marin_rl.objectives.config import AdvantageEstimator
from marin_rl.objectives.xp import array_module

ADVANTAGE_ESTIMATORS: tuple[str, ...] = get_args(AdvantageEstimator)

# DeepSeekMath / TRL / verl add this to the group std so a near-constant group does not blow up (Shao et al. 2024).
GRPO_STD_EPS = 1e-6


def _check_estimator(estimator: str) -> None:
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(
            f"loss.advantage={estimator!r} is not a known estimator; allowed: {list(ADVANTAGE_ESTIMATORS)}"
        )


def _group_advantages_last_axis(rewards: jax.Array, estimator: str) -> jax.Array:
    """Advantages along the last axis (the group axis); leading axes are independent groups."""
    xp = array_module(rewards)
    group_size = rewards.shape[-1]
    if group_size < 2:  # no baseline from a single sample: no signal
        return xp.zeros_like(rewards)
    mean = rewards.mean(axis=-1, keepdims=True)
    centered = rewards - mean
    if estimator == "grpo":
        variance = (centered**2).sum(axis=-1, keepdims=True) / (group_size - 1)
        # sqrt has an infinite derivative at 0: take it only where the variance is positive (NaN-free gradients).
        std_unbiased = xp.where(variance > 0, xp.sqrt(xp.where(variance > 0, variance, 1.0)), 0.0)
        advantages = centered / (std_unbiased + GRPO_STD_EPS)
    elif estimator == "dr_grpo":
        advantages = centered
    else:  # rloo: r_i - (sum - r_i)/(G-1) == G/(G-1) * (r_i - mean)
        advantages = centered * (group_size / (group_size - 1))
    all_equal = rewards.max(axis=-1, keepdims=True) == rewards.min(axis=-1, keepdims=True)
    return xp.where(all_equal, 0.0, advantages).astype(rewards.dtype)


def _as_rewards(rewards, ndim: int, name: str) -> jax.Array:
    xp = array_module(rewards)
    rewards = xp.asarray(rewards)
    if rewards.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {rewards.shape}")
    if not xp.issubdtype(rewards.dtype, xp.floating):
        rewards = rewards.astype(xp.float32)
    return rewards


def batch_group_advantages(rewards, estimator: str) -> jax.Array:
    """[num_groups, G] rewards -> [num_groups, G] advantages, each row one group (formulas in the module docstring);
    NumPy in, NumPy out (the trainer's host side), JAX in, JAX out (objectives/xp.py)."""
    _check_estimator(estimator)
    return _group_advantages_last_axis(_as_rewards(rewards, 2, "rewards"), estimator)


def advantage_metrics(advantages) -> dict[str, jax.Array]:
    """Summary statistics of a batch's advantages for logging: mean, std, mean |A|, max |A|, fraction exactly zero."""
    xp = array_module(advantages)
    advantages = xp.asarray(advantages, dtype=xp.float32).reshape(-1)
    return {
        "advantage/mean": advantages.mean(),
        "advantage/std": advantages.std(),
        "advantage/abs_mean": xp.abs(advantages).mean(),
        "advantage/abs_max": xp.abs(advantages).max(),
        "advantage/zero_frac": (advantages == 0).mean(),
    }
