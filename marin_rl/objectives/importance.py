"""Truncated importance sampling (TIS) between the sampler's and the trainer's log-probs.

The sampler (vLLM, a jitted KV-cache decoder, bf16 kernels...) and the trainer never compute exactly the same
distribution, so rollouts are slightly off-policy even at zero staleness. TIS reweights the per-token objective by
the (truncated) ratio trainer/sampler (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy
RL Training"; Ionides 2008 for truncation):

    token     w_t = min(exp(old_logp_t - sampler_logp_t), cap)
    sequence  w_b = min(exp(sum_t m*(old_logp_t - sampler_logp_t)), cap)   (one weight per answer, on all its tokens)

Masked IS (MIS; verl's rollout correction "mask" mode, slime's MIS, NeMo-RL's sequence masking) drops instead of
reweighting: a token (or a whole answer) whose ratio rho = pi_old / pi_sampler leaves the band [low, high] gets
weight 0, the rest weight 1:

    token      keep_t = [low <= rho_t <= high]
    sequence   keep_b = [low <= prod_t rho_t <= high]
    geometric  keep_b = [low <= exp(mean_t log rho_t) <= high]   (length-independent: long answers are not all cut)

The weights are constants (stop_gradient). They only matter when the PPO ratio is measured against the trainer's
own pre-update log-probs (`loss.ratio_baseline=recompute`); with `ratio_baseline=sampler` the ratio already is
pi_theta / pi_sampler, so `policy_loss` uses w = 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin_rl.objectives.aggregation import _as_float
from marin_rl.objectives.surrogates import masked_log_ratio

TIS_LEVELS = ("token", "sequence")
MIS_LEVELS = ("token", "sequence", "geometric")


def truncated_is_weights(old_logp, sampler_logp, mask, level: str = "token", cap: float = 2.0) -> jax.Array:
    """[B, T] constant weights min(pi_old / pi_sampler, cap) at token or sequence level (module docstring); 1 off-mask."""
    if level not in TIS_LEVELS:
        raise ValueError(f"loss.tis.level={level!r} is not known; allowed: {list(TIS_LEVELS)}")
    if not cap > 0:
        raise ValueError(f"loss.tis.cap={cap!r} must be > 0")
    mask = _as_float(mask)
    log_ratio = jax.lax.stop_gradient(masked_log_ratio(old_logp, sampler_logp, mask))
    if level == "sequence":
        log_ratio = jnp.broadcast_to(log_ratio.sum(axis=-1, keepdims=True), log_ratio.shape)
    # min(exp(x), cap) == exp(min(x, log cap)), and the latter cannot overflow on a long off-policy answer.
    weights = jnp.exp(jnp.minimum(log_ratio, jnp.log(cap)))
    return jnp.where(mask > 0, weights, 1.0)


def truncated_is_clipped(old_logp, sampler_logp, mask, level: str = "token", cap: float = 2.0) -> jax.Array:
    """[B, T] float indicator of the tokens whose raw weight pi_old / pi_sampler exceeded the cap."""
    mask = _as_float(mask)
    log_ratio = jax.lax.stop_gradient(masked_log_ratio(old_logp, sampler_logp, mask))
    if level == "sequence":
        log_ratio = jnp.broadcast_to(log_ratio.sum(axis=-1, keepdims=True), log_ratio.shape)
    return ((log_ratio > jnp.log(cap)) & (mask > 0)).astype(mask.dtype)


def answer_log_ratio(log_ratio, mask, level: str) -> jax.Array:
    """[B, T] log rho at `level`: per token, summed over the answer (sequence), or its token mean (geometric)."""
    if level == "token":
        return log_ratio
    total = log_ratio.sum(axis=-1, keepdims=True)
    if level == "geometric":
        total = total / jnp.maximum(mask.sum(axis=-1, keepdims=True), 1.0)
    return jnp.broadcast_to(total, log_ratio.shape)


def masked_is_keep(old_logp, sampler_logp, mask, level: str, low: float, high: float) -> jax.Array:
    """[B, T] constant 1/0: keep where low <= rho <= high at `level` (module docstring); 1 off-mask."""
    if level not in MIS_LEVELS:
        raise ValueError(f"loss.mis.level={level!r} is not known; allowed: {list(MIS_LEVELS)}")
    mask = _as_float(mask)
    log_ratio = jax.lax.stop_gradient(masked_log_ratio(old_logp, sampler_logp, mask))
    log_rho = answer_log_ratio(log_ratio, mask, level)
    inside = (log_rho >= jnp.log(low)) & (log_rho <= jnp.log(high))
    return jnp.where(mask > 0, inside.astype(mask.dtype), 1.0)
