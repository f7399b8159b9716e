"""Per-token estimators of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman 2020, "Approximating KL
Divergence", http://joschu.net/blog/kl-approx.html), with x = ref_logp - logp = log(pi_ref / pi_theta):

    k1 = -x = logp - ref_logp                  unbiased, high variance, can be negative
    k2 = x^2 / 2                               biased, low variance, >= 0
    k3 = exp(x) - 1 - x                        unbiased, low variance, >= 0 (GRPO, Shao et al. 2024 eq. 4)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from marin_rl.objectives.aggregation import _as_float

KL_KINDS = ("k1", "k2", "k3")


def kl_estimate(logp, ref_logp, kind: str = "k3") -> jax.Array:
    """Per-token KL estimate k1 = logp-ref, k2 = 0.5*(logp-ref)^2, k3 = exp(ref-logp) - 1 - (ref-logp) (Schulman 2020)."""
    if kind not in KL_KINDS:
        raise ValueError(f"loss.kl.kind={kind!r} is not known; allowed: {list(KL_KINDS)}")
    logp, ref_logp = _as_float(logp), _as_float(ref_logp)
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    log_ratio = ref_logp - logp
    # expm1 keeps k3 accurate for the tiny log-ratios of a policy close to its reference.
    return jnp.expm1(log_ratio) - log_ratio
