"""Turning a verdict into a scalar reward: correctness and a small format term.

Length shaping (DAPO's overlong penalty) is not an environment reward: the trainer applies it from `loss.overlong`
(marin_rl.training.data_processing), so it exists once.
"""

from __future__ import annotations

from marin_rl.environments.config import RewardConfig


def combine_reward(config: RewardConfig, correct: bool, format_ok: bool) -> float:
    """reward = (correct ? config.correct : config.incorrect) + config.format * format_ok."""
    reward = config.correct if correct else config.incorrect
    if format_ok:
        reward += config.format
    return float(reward)
