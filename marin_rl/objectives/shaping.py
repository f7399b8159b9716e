"""Reward shaping applied on the trainer side, before advantages: DAPO's soft overlong punishment.

    R_len(|y|) = 0                                          |y| <= L_max - L_buf
               = -factor * (|y| - (L_max - L_buf)) / L_buf   L_max - L_buf < |y| <= L_max
               = -factor                                     |y| > L_max
(Yu et al. 2025, DAPO sec. 3.4, "soft overlong punishment"; L_max = the response cap sampler.max_new_tokens,
L_buf = loss.overlong.buffer_len.) It is added to the task reward, so an answer that runs into the cap is worth
less than the same answer given in time, without the cliff of a hard truncation penalty.
"""

from __future__ import annotations

import jax

from marin_rl.objectives.config import OverlongConfig
from marin_rl.objectives.xp import array_module, as_float


def overlong_penalty(length, max_len: int, buffer_len: int, factor: float = 1.0) -> jax.Array:
    """0 up to max_len - buffer_len, then linear down to -factor at max_len, -factor beyond (DAPO soft punishment)."""
    if buffer_len < 0 or buffer_len > max_len:
        raise ValueError(f"overlong buffer_len={buffer_len} must be in [0, max_len={max_len}]")
    xp = array_module(length)
    length = as_float(length, xp)
    start = max_len - buffer_len
    if buffer_len == 0:  # no soft zone: a hard step at max_len
        ramp = xp.zeros_like(length)
    else:
        ramp = (length - start) / buffer_len
    return (-factor * xp.clip(xp.where(length > max_len, 1.0, ramp), 0.0, 1.0)).astype(length.dtype)


def apply_overlong_penalty(rewards, lengths, max_len: int, cfg: OverlongConfig) -> jax.Array:
    """rewards + overlong_penalty(lengths) when cfg.penalty is on, else rewards unchanged (as float)."""
    rewards = as_float(rewards, array_module(rewards, lengths))
    if not cfg.penalty:
        return rewards
    return rewards + overlong_penalty(lengths, max_len, cfg.buffer_len, cfg.factor)
