"""Policy-ratio surrogates: PPO's clipped objective (with DAPO's decoupled clip range) and GSPO's sequence ratio.

The surrogate is an objective to MAXIMISE; `loss.policy_loss` negates it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin_rl.objectives.aggregation import _as_float, safe_divide


def _per_token_advantages(advantages: jax.Array, like: jax.Array) -> jax.Array:
    """Broadcast [B] per-sequence advantages to [B, T]; [B, T] advantages pass through."""
    if advantages.ndim == like.ndim - 1:
        advantages = advantages[..., None]
    return jnp.broadcast_to(advantages, like.shape)


def clipped_surrogate(ratio, advantages, eps_low: float, eps_high: float) -> jax.Array:
    """min(r*A, clip(r, 1-eps_low, 1+eps_high)*A) per token (Schulman et al. 2017 eq. 7; DAPO clip-higher, Yu et al. 2025)."""
    ratio = _as_float(ratio)
    advantages = _per_token_advantages(_as_float(advantages), ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    return jnp.minimum(ratio * advantages, clipped_ratio * advantages)


def clip_indicators(ratio, advantages, eps_low: float, eps_high: float) -> tuple[jax.Array, jax.Array]:
    """(low, high) float indicators of the tokens where the clipped branch wins, i.e. the gradient is cut.

    low: r < 1 - eps_low with A < 0 (the update would push a disfavoured token further down);
    high: r > 1 + eps_high with A > 0 (the update would push a favoured token further up).
    """
    ratio = _as_float(ratio)
    advantages = _per_token_advantages(_as_float(advantages), ratio)
    low = (ratio < 1.0 - eps_low) & (advantages < 0)
    high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return low.astype(ratio.dtype), high.astype(ratio.dtype)


def masked_log_ratio(logp, old_logp, mask) -> jax.Array:
    """logp - old_logp on counted tokens, 0 elsewhere (so padding can never overflow an exp)."""
    logp, old_logp, mask = _as_float(logp), _as_float(old_logp), _as_float(mask)
    return jnp.where(mask > 0, logp - old_logp, 0.0)


def token_ratio(logp, old_logp, mask) -> jax.Array:
    """r_t = exp(logp_t - old_logp_t) per token (PPO), exactly 1 on tokens outside the mask."""
    return jnp.exp(masked_log_ratio(logp, old_logp, mask))


def gspo_ratio(logp, old_logp, mask) -> jax.Array:
    """s_b = exp(sum_t m*(logp - old_logp) / sum_t m) per sequence (GSPO, Zheng et al. 2025); 1 for empty rows."""
    mask = _as_float(mask)
    mean_log_ratio = safe_divide(masked_log_ratio(logp, old_logp, mask).sum(axis=-1), mask.sum(axis=-1))
    return jnp.exp(mean_log_ratio)
