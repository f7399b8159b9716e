"""policy_loss assembled from the pieces: hand-computed values and gradients, TIS, KL, entropy, micro-batching."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_rl.objectives import (
    LossConfig,
    Normalizer,
    aggregate_with_normalizer,
    batch_normalizer,
    kl_estimate,
    policy_loss,
)

EXPECTED_METRICS = {
    "loss/total",
    "loss/policy",
    "loss/kl",
    "loss/clip_frac_low",
    "loss/clip_frac_high",
    "loss/ratio_mean",
    "loss/sampler_trainer_logp_gap",
    "loss/approx_kl",
    "loss/tis_weight_mean",
    "loss/tis_clipped_frac",
    "loss/mis_masked_frac",
    "loss/advantage_mean",
    "loss/advantage_abs_mean",
}

# Two answers of two tokens; ratios exp(logp - old) = [[1.5, 0.5], [0.7, 1.1]], advantages [+1, -1].
RATIOS = np.array([[1.5, 0.5], [0.7, 1.1]], np.float32)
OLD = np.array([[-1.0, -2.0], [-0.5, -1.5]], np.float32)
LOGP = OLD + np.log(RATIOS)
ADV = np.array([1.0, -1.0], np.float32)
MASK = np.ones((2, 2), np.float32)


def aggregate_loss(per_token, mask, mode, fixed_budget=None):
    """A whole batch aggregated on its own normalizer: what the train step does when there is one micro-batch."""
    return aggregate_with_normalizer(per_token, mask, mode, batch_normalizer(mask, fixed_budget))



def config(**overrides) -> LossConfig:
    return LossConfig(name="test", **overrides)


def run(cfg, logp=LOGP, old=OLD, sampler=None, adv=ADV, mask=MASK, **kw):
    sampler = old if sampler is None else sampler
    return policy_loss(logp, old, sampler, adv, mask, cfg, batch_normalizer(mask, cfg.fixed_budget), **kw)


def test_token_level_value_gradient_and_clip_metrics_by_hand():
    cfg = config(clip_eps_low=0.2, clip_eps_high=0.28, aggregation="token_mean")
    # A=+1: min(1.5, 1.28) = 1.28 (clipped high), min(0.5, 0.8) = 0.5; A=-1: min(-0.7, -0.8) = -0.8 (clipped low),
    # min(-1.1, -1.1) = -1.1. Loss = -(1.28 + 0.5 - 0.8 - 1.1) / 4 = 0.03.
    loss, metrics = run(cfg)
    np.testing.assert_allclose(loss, 0.03, atol=1e-6)
    assert set(metrics) == EXPECTED_METRICS  # no entropy given -> no entropy metric
    np.testing.assert_allclose(metrics["loss/clip_frac_high"], 0.25)
    np.testing.assert_allclose(metrics["loss/clip_frac_low"], 0.25)
    np.testing.assert_allclose(metrics["loss/ratio_mean"], RATIOS.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        metrics["loss/sampler_trainer_logp_gap"], np.abs(np.log(RATIOS)).mean(), rtol=1e-6
    )
    k3 = RATIOS - 1 - np.log(RATIOS)  # KL(old || new) with x = log(new / old)
    np.testing.assert_allclose(metrics["loss/approx_kl"], k3.mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/tis_weight_mean"], 1.0)
    np.testing.assert_allclose(metrics["loss/policy"], loss)
    # d(-r A / N)/d logp = -r A / N where unclipped, 0 where the clipped branch is active.
    grad = jax.grad(lambda lp: run(cfg, logp=lp)[0])(jnp.asarray(LOGP))
    np.testing.assert_allclose(grad, [[0.0, -0.5 / 4], [0.0, 1.1 / 4]], rtol=1e-5, atol=1e-7)


def test_old_and_sampler_logp_and_advantages_get_no_gradient():
    cfg = config(ratio_baseline="recompute")
    grads = jax.grad(lambda o, s, a: run(cfg, old=o, sampler=s, adv=a)[0], argnums=(0, 1, 2))(
        jnp.asarray(OLD), jnp.asarray(OLD - 0.1), jnp.asarray(ADV)
    )
    for grad in grads:
        np.testing.assert_array_equal(grad, 0.0)


def test_gspo_sequence_ratio_value_and_gradient():
    cfg = config(
        ratio_level="sequence", clip_eps_low=3e-4, clip_eps_high=4e-4, aggregation="seq_mean_token_mean"
    )
    old = np.zeros((2, 3), np.float32)
    mask = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
    # row 0: mean log ratio 1e-4 (inside the clip range); row 1: mean 1e-2 (above 1 + 4e-4, A > 0: clipped)
    logp = np.array([[0.5e-4, 1.5e-4, 9.0], [0.0, 0.01, 0.02]], np.float32)
    adv = np.array([2.0, 1.0], np.float32)
    loss, metrics = run(cfg, logp=logp, old=old, adv=adv, mask=mask)
    s0, s1 = np.exp(1e-4), np.exp(0.01)
    np.testing.assert_allclose(loss, -(s0 * 2.0 + (1 + 4e-4) * 1.0) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/clip_frac_high"], 0.5)  # one answer of two
    np.testing.assert_allclose(metrics["loss/ratio_mean"], (s0 + s1) / 2, rtol=1e-5)
    grad = jax.grad(lambda lp: run(cfg, logp=lp, old=old, adv=adv, mask=mask)[0])(jnp.asarray(logp))
    # d/dlogp_t of -(s0 A0)/B with s0 = exp(mean_t log ratio): -A0 s0 / (n0 B) on row 0's counted tokens.
    np.testing.assert_allclose(grad[0], [-2.0 * s0 / 4, -2.0 * s0 / 4, 0.0], rtol=1e-5)
    np.testing.assert_array_equal(grad[1], 0.0)


def test_masked_is_drops_tokens_and_answers_outside_the_band():
    old = np.zeros((2, 3), np.float32)
    # ratios pi_old / pi_sampler: row 0 = 3.0, 1.5, 1.0 ; row 1 = 0.36, 1.0, (padding)
    sampler = np.array([[-np.log(3.0), -np.log(1.5), 0.0], [-np.log(0.36), 0.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0]], np.float32)
    adv = np.array([1.0, 1.0], np.float32)
    token = config(ratio_baseline="recompute", tis={"enabled": False}, mis={"enabled": True, "low": 0.5, "high": 2.0})
    loss, metrics = run(token, logp=old, old=old, sampler=sampler, adv=adv, mask=mask)
    # token level: 3.0 and 0.36 leave [0.5, 2]; 3 of 5 tokens keep their surrogate of 1 (token_mean over N = 5)
    np.testing.assert_allclose(metrics["loss/mis_masked_frac"], 2 / 5, rtol=1e-6)
    np.testing.assert_allclose(loss, -3 / 5, rtol=1e-5)
    # sequence level: row 0's product 4.5 and row 1's 0.36 both leave the band: everything is dropped
    seq = token.model_copy(update={"mis": token.mis.model_copy(update={"level": "sequence"})})
    loss, metrics = run(seq, logp=old, old=old, sampler=sampler, adv=adv, mask=mask)
    np.testing.assert_allclose(metrics["loss/mis_masked_frac"], 1.0)
    np.testing.assert_allclose(loss, 0.0, atol=1e-7)
    # geometric: row 0 exp(mean log) = 4.5^(1/3) = 1.65 and row 1 sqrt(0.36) = 0.6 stay inside
    geo = token.model_copy(update={"mis": token.mis.model_copy(update={"level": "geometric"})})
    loss, metrics = run(geo, logp=old, old=old, sampler=sampler, adv=adv, mask=mask)
    np.testing.assert_allclose(metrics["loss/mis_masked_frac"], 0.0)
    np.testing.assert_allclose(loss, -1.0, rtol=1e-5)


def test_truncated_is_recompute_caps_weight_sampler_baseline_ignores_it():
    cfg = config(ratio_baseline="recompute", tis={"enabled": True, "level": "token", "cap": 2.0})
    old = np.zeros((1, 2), np.float32)
    sampler = np.array([[-np.log(3.0), -np.log(1.5)]], np.float32)  # raw weights 3.0 (capped at 2) and 1.5
    logp = old  # ratio 1, A = 1: per-token surrogate 1
    adv, mask = np.array([1.0], np.float32), np.ones((1, 2), np.float32)
    loss, metrics = run(cfg, logp=logp, old=old, sampler=sampler, adv=adv, mask=mask)
    np.testing.assert_allclose(loss, -(2.0 + 1.5) / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/tis_weight_mean"], 1.75, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/tis_clipped_frac"], 0.5)
    # sequence level: one weight exp(log 3 + log 1.5) = 4.5 -> capped at 2 for both tokens
    seq_cfg = config(ratio_baseline="recompute", tis={"level": "sequence", "cap": 2.0})
    loss, _ = run(seq_cfg, logp=logp, old=old, sampler=sampler, adv=adv, mask=mask)
    np.testing.assert_allclose(loss, -2.0, rtol=1e-5)
    # ratio_baseline=sampler: the ratio already measures against the sampler, so w = 1
    loss, metrics = run(
        config(ratio_baseline="sampler"), logp=logp, old=old, sampler=sampler, adv=adv, mask=mask
    )
    np.testing.assert_allclose(loss, -1.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss/tis_weight_mean"], 1.0)
    loss, _ = run(
        config(ratio_baseline="recompute", tis={"enabled": False}),
        logp=logp,
        old=old,
        sampler=sampler,
        adv=adv,
        mask=mask,
    )
    np.testing.assert_allclose(loss, -1.0, rtol=1e-6)


def test_kl_and_entropy_terms():
    ref = OLD - 0.3
    entropy = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    base, _ = run(config())
    cfg = config(kl={"coef": 0.1, "kind": "k3"}, entropy_coef=0.01)
    loss, metrics = run(cfg, ref_logp=ref, entropy=entropy)
    kl_mean = float(aggregate_loss(kl_estimate(LOGP, ref, "k3"), MASK, "token_mean"))
    np.testing.assert_allclose(loss, float(base) + 0.1 * kl_mean - 0.01 * 2.5, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/kl"], kl_mean, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/entropy"], 2.5)
    # the entropy bonus is differentiable through the given entropy: d loss / d H = -coef / N
    grad = jax.grad(lambda h: run(cfg, ref_logp=ref, entropy=h)[0])(jnp.asarray(entropy))
    np.testing.assert_allclose(grad, -0.01 / 4, rtol=1e-5)
    with pytest.raises(ValueError, match="ref_logp"):
        run(cfg, entropy=entropy)
    with pytest.raises(ValueError, match="entropy"):
        run(cfg, ref_logp=ref)


def test_padding_garbage_gives_finite_loss_and_gradients():
    cfg = config(ratio_baseline="recompute", kl={"coef": 0.1}, entropy_coef=0.01)
    mask = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], np.float32)
    logp = np.full((3, 3), -1.0, np.float32)
    junk = np.where(mask > 0, -1.2, -np.inf).astype(np.float32)  # sampler/ref report -inf on padding
    entropy = np.where(mask > 0, 1.0, np.nan).astype(np.float32)
    adv = np.array([1.0, -1.0, 5.0], np.float32)
    loss, grad = jax.value_and_grad(
        lambda lp: policy_loss(
            lp, junk, junk, adv, mask, cfg, batch_normalizer(mask), ref_logp=junk, entropy=entropy
        )[0]
    )(jnp.asarray(logp))
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    np.testing.assert_array_equal(np.asarray(grad)[mask == 0], 0.0)
    _, metrics = policy_loss(
        logp, junk, junk, adv, mask, cfg, batch_normalizer(mask), ref_logp=junk, entropy=entropy
    )
    assert all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize(
    "overrides",
    [
        {"aggregation": "token_mean"},
        {"aggregation": "seq_mean_token_mean", "ratio_baseline": "recompute", "tis": {"level": "sequence"}},
        {"aggregation": "seq_mean_token_sum_norm", "fixed_budget": 4, "kl": {"coef": 0.05}},
        {"aggregation": "batch_scaled_token_mean", "entropy_coef": 0.02, "ratio_baseline": "recompute"},
        {"aggregation": "token_sum", "ratio_level": "sequence", "clip_eps_low": 3e-4, "clip_eps_high": 4e-4},
    ],
    ids=lambda o: o["aggregation"],
)
def test_micro_batches_sum_to_full_batch_loss_grad_and_metrics(overrides):
    cfg = config(**overrides)
    rng = np.random.default_rng(1)
    batch, tokens = 6, 5
    lengths = np.array([5, 1, 3, 0, 4, 2])
    mask = (np.arange(tokens)[None] < lengths[:, None]).astype(np.float32)
    old = rng.normal(-1.0, 0.3, (batch, tokens)).astype(np.float32)
    sampler = old + rng.normal(0, 0.2, old.shape).astype(np.float32)
    logp = old + rng.normal(0, 0.2, old.shape).astype(np.float32)
    ref = old + rng.normal(0, 0.1, old.shape).astype(np.float32)
    entropy = rng.uniform(0.5, 2.0, old.shape).astype(np.float32)
    adv = rng.normal(size=batch).astype(np.float32)
    normalizer = batch_normalizer(mask, cfg.fixed_budget)

    def loss_and_grad(logp, rows_old, rows_sampler, rows_adv, rows_mask, rows_ref, rows_entropy, normalizer):
        # eager, not jitted: the per-op kernels are shared by all five configs, a jit would compile each anew
        def f(lp):
            return policy_loss(
                lp,
                rows_old,
                rows_sampler,
                rows_adv,
                rows_mask,
                cfg,
                normalizer,
                ref_logp=rows_ref,
                entropy=rows_entropy,
            )

        (loss, metrics), grad = jax.value_and_grad(f, has_aux=True)(logp)
        return loss, metrics, grad

    full = loss_and_grad(logp, old, sampler, adv, mask, ref, entropy, normalizer)
    parts = [np.array([0, 2, 5]), np.array([1, 3, 4])]  # equal sizes: one compile serves both micro-batches
    pieces = [
        loss_and_grad(logp[r], old[r], sampler[r], adv[r], mask[r], ref[r], entropy[r], normalizer)
        for r in parts
    ]
    np.testing.assert_allclose(sum(p[0] for p in pieces), full[0], rtol=1e-5, atol=1e-7)
    accumulated_grad = np.zeros_like(logp)
    for rows, piece in zip(parts, pieces):
        accumulated_grad[rows] = piece[2]  # each row's logp lives in exactly one micro-batch
    np.testing.assert_allclose(accumulated_grad, full[2], rtol=1e-5, atol=1e-7)
    for key, value in full[1].items():
        np.testing.assert_allclose(sum(p[1][key] for p in pieces), value, rtol=1e-5, atol=1e-7, err_msg=key)


def test_normalizer_budget_taken_from_config_and_conflict_rejected():
    cfg = config(aggregation="seq_mean_token_sum_norm", fixed_budget=4)
    no_budget = batch_normalizer(MASK)
    loss, _ = policy_loss(LOGP, OLD, OLD, ADV, MASK, cfg, no_budget)
    np.testing.assert_allclose(loss, -(1.28 + 0.5 - 0.8 - 1.1) / 4 / 2, rtol=1e-5)
    with pytest.raises(ValueError, match="fixed_budget"):
        policy_loss(LOGP, OLD, OLD, ADV, MASK, cfg, dataclasses.replace(no_budget, fixed_budget=8))


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(LOGP, OLD, OLD, np.ones(3), MASK, config(), batch_normalizer(MASK))
    with pytest.raises(ValueError, match="old_logp"):
        policy_loss(LOGP, OLD[:, :1], OLD, ADV, MASK, config(), batch_normalizer(MASK))


def test_normalizer_can_be_built_by_hand_and_passed_through_jit():
    normalizer = Normalizer(total_tokens=jnp.float32(8.0), total_sequences=jnp.float32(4.0))
    loss, _ = jax.jit(lambda n: policy_loss(LOGP, OLD, OLD, ADV, MASK, config(), n))(normalizer)
    np.testing.assert_allclose(loss, 0.03 * 4 / 8, atol=1e-6)  # the same sum divided by a bigger N
