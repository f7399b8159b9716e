"""Turning a verdict into a scalar reward: correctness, a small format term, and the overlong penalty."""

from __future__ import annotations

from marin_rl.environments.config import RewardConfig


def overlong_penalty(length: int, max_len: int, buffer_len: int, factor: float) -> float:
    """DAPO soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to max_len-buffer_len, then linear to -factor.

    `length` beyond max_len gets -factor. Same formula as `marin_rl.objectives.overlong_penalty` (JAX), in python
    because rewards are computed per response on the rollout side.
    """
    onset = max_len - buffer_len
    if length <= onset:
        return 0.0
    if length >= max_len or buffer_len == 0:
        return -factor
    return -factor * (length - onset) / buffer_len


def combine_reward(config: RewardConfig, correct: bool, format_ok: bool, length: int) -> float:
    """reward = (correct ? config.correct : config.incorrect) + config.format * format_ok + overlong penalty."""
    reward = config.correct if correct else config.incorrect
    if format_ok:
        reward += config.format
    overlong = config.overlong
    if overlong.enabled and overlong.max_len is not None:
        reward += overlong_penalty(length, overlong.max_len, overlong.buffer_len, overlong.factor)
    return float(reward)
