"""The full policy loss of one (micro-)batch: clipped surrogate (token or GSPO sequence ratio) x truncated IS,
plus optional KL to a reference policy and entropy bonus, aggregated with the batch-wide normalizer.

    loss = agg(-w * min(r A, clip(r, 1-eps_low, 1+eps_high) A)) + kl.coef * agg(KL_k) - entropy_coef * agg(H)

r is exp(logp - old_logp) per token (PPO, Schulman et al. 2017) or, with ratio_level=sequence, GSPO's per-answer
exp(mean_t(logp - old_logp)) on every token of the answer (Zheng et al. 2025); w is the truncated IS weight
times the masked IS keep indicator (`importance.py`), agg the configured aggregation with the WHOLE batch's N and B (`aggregation.py`).

Gradient accumulation: compute `normalizer = batch_normalizer(full_mask, cfg.fixed_budget)` once on the whole batch,
call `policy_loss` per micro-batch with it and SUM the losses and gradients; the result equals one call on the
whole batch. Every metric is built the same way (token means divide by the whole batch's N, per-answer means by its
B), so metrics are also combined by SUMMING over micro-batches, never by averaging.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from marin_rl.objectives.aggregation import (
    Normalizer,
    _as_float,
    aggregate_with_normalizer,
    batch_normalizer,
    masked_sequence_mean,
    masked_token_mean,
)
from marin_rl.objectives.config import LossConfig
from marin_rl.objectives.importance import masked_is_keep, truncated_is_clipped, truncated_is_weights
from marin_rl.objectives.kl import kl_estimate
from marin_rl.objectives.surrogates import clip_indicators, clipped_surrogate, gspo_ratio, token_ratio

__all__ = ["Normalizer", "aggregate_with_normalizer", "batch_normalizer", "policy_loss"]


def _resolve_normalizer(cfg: LossConfig, normalizer: Normalizer) -> Normalizer:
    """The normalizer with the config's fixed budget filled in; a conflicting budget is an error."""
    if cfg.aggregation != "seq_mean_token_sum_norm":
        return normalizer
    if normalizer.fixed_budget is None:
        return dataclasses.replace(normalizer, fixed_budget=cfg.fixed_budget)
    if cfg.fixed_budget is not None and normalizer.fixed_budget != cfg.fixed_budget:
        raise ValueError(
            f"normalizer.fixed_budget={normalizer.fixed_budget} differs from loss.fixed_budget={cfg.fixed_budget}"
        )
    return normalizer


def _check_shapes(mask: jax.Array, advantages: jax.Array, **token_arrays: jax.Array | None) -> None:
    if mask.ndim != 2:
        raise ValueError(f"mask must be [batch, tokens], got shape {mask.shape}")
    for name, value in token_arrays.items():
        if value is not None and value.shape != mask.shape:
            raise ValueError(f"{name} shape {value.shape} != mask shape {mask.shape}")
    if advantages.shape != mask.shape[:1]:
        raise ValueError(
            f"advantages must be one per sequence, shape {mask.shape[:1]}; got {advantages.shape}"
        )


def policy_loss(
    logp,
    old_logp,
    sampler_logp,
    advantages,
    mask,
    cfg: LossConfig,
    normalizer: Normalizer,
    ref_logp=None,
    entropy=None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(scalar loss to minimise, metrics) of one micro-batch; see the module docstring for the formula.

    logp [B, T]: trainer log-probs of the response tokens (differentiable). old_logp [B, T]: what the ratio is
    measured against (constant; = sampler_logp for ratio_baseline=sampler, the trainer's pre-update log-probs for
    recompute). sampler_logp [B, T]: the behaviour policy's log-probs (truncated IS and the gap metric).
    advantages [B]; mask [B, T] (1 = a response token that counts). ref_logp [B, T]: needed when kl.coef > 0.
    entropy [B, T]: per-token entropy, needed when entropy_coef != 0 (differentiable for the bonus).

    Metrics (scalars, SUM them over micro-batches): loss/total, loss/policy (the aggregated policy term),
    loss/kl (token mean of the configured KL estimate to ref_logp; 0 when ref_logp is None), loss/entropy (token
    mean; only when entropy is given), loss/clip_frac_low / loss/clip_frac_high (share of tokens, or answers with
    ratio_level=sequence, whose clipped branch is active), loss/ratio_mean (token mean of r, or answer mean of the
    GSPO ratio), loss/sampler_trainer_logp_gap (token mean |logp - sampler_logp|), loss/approx_kl (token mean of the
    k3 estimate of KL(old || current)), loss/tis_weight_mean and loss/tis_clipped_frac (token means; TIS applies
    only with tis.enabled and ratio_baseline=recompute, else w = 1; the mean includes masked IS zeros),
    loss/mis_masked_frac (token share that masked IS dropped; 0 unless mis.enabled), loss/advantage_mean, loss/advantage_abs_mean
    (answer means).
    """
    normalizer = _resolve_normalizer(cfg, normalizer)
    mask = _as_float(mask)
    advantages = jax.lax.stop_gradient(_as_float(advantages))
    token_arrays = dict(
        logp=logp, old_logp=old_logp, sampler_logp=sampler_logp, ref_logp=ref_logp, entropy=entropy
    )
    token_arrays = {k: None if v is None else _as_float(v) for k, v in token_arrays.items()}
    _check_shapes(mask, advantages, **token_arrays)
    # Zero every input outside the mask: padding may hold -inf or garbage log-probs, and an inf anywhere upstream of
    # a masked sum turns its gradient into NaN (0 * inf), even though the value is masked out.
    counted = mask > 0
    token_arrays = {k: None if v is None else jnp.where(counted, v, 0.0) for k, v in token_arrays.items()}
    logp, entropy = token_arrays["logp"], token_arrays["entropy"]
    old_logp = jax.lax.stop_gradient(token_arrays["old_logp"])
    sampler_logp = jax.lax.stop_gradient(token_arrays["sampler_logp"])
    ref_logp = None if ref_logp is None else jax.lax.stop_gradient(token_arrays["ref_logp"])
    mode = cfg.aggregation

    def aggregate(per_token):
        return aggregate_with_normalizer(per_token, mask, mode, normalizer)

    # Policy ratio and the clipped surrogate.
    if cfg.ratio_level == "sequence":
        sequence_ratio = gspo_ratio(logp, old_logp, mask)
        ratio = jnp.broadcast_to(sequence_ratio[:, None], mask.shape)
    else:
        ratio = token_ratio(logp, old_logp, mask)
    surrogate = clipped_surrogate(ratio, advantages, cfg.clip_eps_low, cfg.clip_eps_high)

    # Truncated IS: with ratio_baseline=sampler the ratio already is pi_theta / pi_sampler, so w = 1.
    if cfg.tis.enabled and cfg.ratio_baseline == "recompute":
        tis_weights = truncated_is_weights(old_logp, sampler_logp, mask, cfg.tis.level, cfg.tis.cap)
        tis_clipped = truncated_is_clipped(old_logp, sampler_logp, mask, cfg.tis.level, cfg.tis.cap)
    else:
        tis_weights = jnp.ones_like(mask)
        tis_clipped = jnp.zeros_like(mask)
    # Masked IS (validated to need ratio_baseline=recompute): tokens outside the band weigh 0.
    mis_keep = jnp.ones_like(mask)
    if cfg.mis.enabled:
        mis_keep = masked_is_keep(old_logp, sampler_logp, mask, cfg.mis.level, cfg.mis.low, cfg.mis.high)
    tis_weights = tis_weights * mis_keep

    policy_term = aggregate(-tis_weights * surrogate)
    loss = policy_term

    kl_per_token = None if ref_logp is None else kl_estimate(logp, ref_logp, cfg.kl.kind)
    if cfg.kl.coef > 0:
        if kl_per_token is None:
            raise ValueError(f"loss.kl.coef={cfg.kl.coef} > 0 needs ref_logp (reference-policy log-probs)")
        loss = loss + cfg.kl.coef * aggregate(kl_per_token)
    if cfg.entropy_coef != 0:
        if entropy is None:
            raise ValueError(f"loss.entropy_coef={cfg.entropy_coef} != 0 needs the per-token entropy")
        loss = loss - cfg.entropy_coef * aggregate(entropy)

    metrics = _metrics(
        loss=loss,
        policy_term=policy_term,
        logp=logp,
        old_logp=old_logp,
        sampler_logp=sampler_logp,
        advantages=advantages,
        mask=mask,
        ratio=ratio,
        cfg=cfg,
        normalizer=normalizer,
        tis_weights=tis_weights,
        tis_clipped=tis_clipped,
        mis_keep=mis_keep,
        kl_per_token=kl_per_token,
        entropy=entropy,
    )
    return loss, metrics


def _metrics(
    *,
    loss,
    policy_term,
    logp,
    old_logp,
    sampler_logp,
    advantages,
    mask,
    ratio,
    cfg: LossConfig,
    normalizer: Normalizer,
    tis_weights,
    tis_clipped,
    mis_keep,
    kl_per_token,
    entropy,
) -> dict[str, jax.Array]:
    """Diagnostics of one micro-batch, each additive over micro-batches (see policy_loss)."""
    sg = jax.lax.stop_gradient
    logp = sg(logp)
    ratio = sg(ratio)

    def token_mean(values):
        return masked_token_mean(values, mask, normalizer)

    def answer_mean(values):
        return masked_sequence_mean(values, mask, normalizer)

    if cfg.ratio_level == "sequence":
        sequence_ratio = ratio[:, 0]
        clip_low, clip_high = clip_indicators(sequence_ratio, advantages, cfg.clip_eps_low, cfg.clip_eps_high)
        clip_frac_low, clip_frac_high = answer_mean(clip_low), answer_mean(clip_high)
        ratio_mean = answer_mean(sequence_ratio)
    else:
        clip_low, clip_high = clip_indicators(ratio, advantages, cfg.clip_eps_low, cfg.clip_eps_high)
        clip_frac_low, clip_frac_high = token_mean(clip_low), token_mean(clip_high)
        ratio_mean = token_mean(ratio)

    metrics = {
        "loss/total": sg(loss),
        "loss/policy": sg(policy_term),
        "loss/kl": jnp.zeros((), mask.dtype) if kl_per_token is None else token_mean(sg(kl_per_token)),
        "loss/clip_frac_low": clip_frac_low,
        "loss/clip_frac_high": clip_frac_high,
        "loss/ratio_mean": ratio_mean,
        "loss/sampler_trainer_logp_gap": token_mean(jnp.abs(logp - sampler_logp)),
        "loss/approx_kl": token_mean(kl_estimate(old_logp, logp, "k3")),
        "loss/tis_weight_mean": token_mean(tis_weights),
        "loss/tis_clipped_frac": token_mean(tis_clipped),
        "loss/mis_masked_frac": token_mean(1.0 - mis_keep),
        "loss/advantage_mean": answer_mean(advantages),
        "loss/advantage_abs_mean": answer_mean(jnp.abs(advantages)),
    }
    if entropy is not None:
        metrics["loss/entropy"] = token_mean(sg(entropy))
    return metrics
