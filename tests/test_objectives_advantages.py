"""Group advantages and zero-variance filtering against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_rl.objectives import (
    ADVANTAGE_ESTIMATORS,
    GroupAccounting,
    advantage_metrics,
    batch_group_advantages,
    zero_variance_groups,
)
from marin_rl.objectives.config import DynamicSamplingConfig

REWARDS = [1.0, 0.0, 0.0, 0.0]


def group_advantages(rewards_G, estimator):
    """One group through the batched estimator the trainer runs."""
    return batch_group_advantages(np.asarray(rewards_G)[None], estimator)[0]


def test_grpo_matches_hand_computation():
    # mean 0.25; centered [.75, -.25, -.25, -.25]; unbiased var = (0.5625 + 3 * 0.0625) / 3 = 0.25 -> std 0.5
    expected = np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)
    np.testing.assert_allclose(group_advantages(REWARDS, "grpo"), expected, rtol=1e-6)


def test_dr_grpo_is_centered_reward():
    np.testing.assert_allclose(group_advantages(REWARDS, "dr_grpo"), [0.75, -0.25, -0.25, -0.25], rtol=1e-6)


def test_rloo_is_leave_one_out():
    # r_i - mean of the others: 1 - 0, 0 - 1/3, ...
    np.testing.assert_allclose(group_advantages(REWARDS, "rloo"), [1.0, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6)
    rewards = np.array([0.2, 0.9, 0.4])
    by_hand = [r - np.delete(rewards, i).mean() for i, r in enumerate(rewards)]
    np.testing.assert_allclose(group_advantages(rewards, "rloo"), by_hand, rtol=1e-5)


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.7])
def test_all_equal_group_gets_exact_zeros(estimator, value):
    # 0.1 and 0.7 are not exact in binary; the mean's rounding residue must not leak into (r - mean) / tiny std.
    advantages = group_advantages(np.full(5, value, np.float32), estimator)
    assert np.all(np.asarray(advantages) == 0.0)


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
def test_group_of_one_gets_zero(estimator):
    np.testing.assert_array_equal(group_advantages([3.0], estimator), [0.0])


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS)
def test_batch_version_matches_per_group_and_jit_grad(estimator):
    rewards = np.array([[1.0, 0.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5], [0.0, 0.2, 0.9, 0.3]], np.float32)
    batched = jax.jit(batch_group_advantages, static_argnums=1)(rewards, estimator)
    for row, expected in zip(rewards, batched):
        np.testing.assert_allclose(group_advantages(row, estimator), expected, rtol=1e-6)
    grads = jax.grad(lambda r: batch_group_advantages(r, estimator)[:, 0].sum())(jnp.asarray(rewards))
    assert np.all(np.isfinite(grads))
    np.testing.assert_array_equal(grads[1], 0.0)  # the all-equal group is a constant 0


def test_integer_rewards_accepted():
    np.testing.assert_allclose(group_advantages(np.array([1, 0]), "dr_grpo"), [0.5, -0.5])


def test_unknown_estimator_names_allowed_values():
    with pytest.raises(ValueError, match="allowed.*grpo.*dr_grpo.*rloo"):
        group_advantages(REWARDS, "ppo")
    with pytest.raises(ValueError, match="num_groups|dimension"):
        batch_group_advantages(REWARDS, "grpo")


def test_advantage_metrics():
    metrics = advantage_metrics(np.array([1.0, -1.0, 0.0, 0.0]))
    assert float(metrics["advantage/mean"]) == 0.0
    assert float(metrics["advantage/abs_mean"]) == 0.5
    assert float(metrics["advantage/abs_max"]) == 1.0
    assert float(metrics["advantage/zero_frac"]) == 0.5
    np.testing.assert_allclose(metrics["advantage/std"], np.sqrt(0.5))


def test_zero_variance_groups_and_fraction():
    rewards = np.array([[1, 1, 1], [0, 1, 0], [0, 0, 0], [0.5, 0.5, 0.25]])
    zero_variance = jax.jit(zero_variance_groups)(rewards)
    np.testing.assert_array_equal(zero_variance, [True, False, True, False])
    np.testing.assert_array_equal(zero_variance_groups(np.zeros((2, 1))), [True, True])  # G = 1: no signal
    with pytest.raises(ValueError, match="num_groups"):
        zero_variance_groups(np.zeros(3))


def test_group_accounting_dynamic_sampling_rounds():
    cfg = DynamicSamplingConfig(enabled=True, max_extra_rounds=2)
    accounting = GroupAccounting(target_groups=4)
    assert accounting.prompts_for_next_round() == 4  # nothing seen yet: a full round
    accounting = accounting.record([True, False, True, True])  # 1 kept, 3 dropped
    assert (accounting.kept_groups, accounting.dropped_groups, accounting.rounds) == (1, 3, 1)
    assert accounting.needs_more(cfg)
    # keep rate 1/4, 3 missing -> 12 estimated, capped at one full batch of 4
    assert accounting.prompts_for_next_round() == 4
    accounting = accounting.record([False, False, True, False])  # 3 more kept -> 4 = target
    assert not accounting.needs_more(cfg)
    assert accounting.prompts_for_next_round() == 0
    metrics = accounting.metrics()
    assert metrics["filter/zero_variance_frac"] == 4 / 8
    assert metrics["filter/batch_fill"] == 1.0
    assert metrics["filter/sampling_rounds"] == 2.0


def test_group_accounting_stops_after_max_extra_rounds_and_when_disabled():
    accounting = GroupAccounting(target_groups=8).record([True] * 7 + [False])
    assert accounting.prompts_for_next_round() == 8  # keep rate 1/8 would ask 56: capped at one full batch
    accounting = GroupAccounting(target_groups=8, kept_groups=6, dropped_groups=2, rounds=1)
    assert accounting.prompts_for_next_round() == 3  # 2 missing / keep rate 0.75 = 2.67 -> 3
    assert not accounting.needs_more(DynamicSamplingConfig(enabled=False))
    exhausted = GroupAccounting(target_groups=8, kept_groups=1, rounds=3)
    assert exhausted.needs_more(DynamicSamplingConfig(enabled=True, max_extra_rounds=3))
    assert not exhausted.record([True]).needs_more(DynamicSamplingConfig(enabled=True, max_extra_rounds=3))
    with pytest.raises(ValueError, match="target_groups"):
        GroupAccounting(target_groups=0)
