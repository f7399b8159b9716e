"""Surrogates, ratios, truncated IS, KL estimators, overlong shaping/filtering, greedy warning."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_rl.objectives import (
    GreedySamplingWarning,
    apply_overlong_penalty,
    clip_indicators,
    clipped_surrogate,
    gspo_ratio,
    kl_estimate,
    mask_truncated,
    overlong_penalty,
    token_ratio,
    truncated_is_clipped,
    truncated_is_weights,
    warn_if_greedy,
)
from marin_rl.objectives.config import OverlongConfig


def test_clipped_surrogate_by_hand_and_broadcast():
    ratio = np.array([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], np.float32)
    adv = np.array([2.0, -1.0], np.float32)
    # A=2: min(r A, clip(r, 0.8, 1.2) A) = [1.0, 2.0, 2.4]; A=-1: [-0.8, -1.0, -1.5]
    out = jax.jit(clipped_surrogate, static_argnums=(2, 3))(ratio, adv, 0.2, 0.2)
    np.testing.assert_allclose(out, [[1.0, 2.0, 2.4], [-0.8, -1.0, -1.5]], rtol=1e-6)
    per_token_adv = np.broadcast_to(adv[:, None], ratio.shape)
    np.testing.assert_allclose(clipped_surrogate(ratio, per_token_adv, 0.2, 0.2), out)
    grad = jax.grad(lambda r: clipped_surrogate(r, adv, 0.2, 0.2).sum())(jnp.asarray(ratio))
    np.testing.assert_allclose(grad, [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]])  # zero where the clip is active
    low, high = clip_indicators(ratio, adv, 0.2, 0.2)
    np.testing.assert_array_equal(high, [[0, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(low, [[0, 0, 0], [1, 0, 0]])


def test_token_and_gspo_ratio_by_hand():
    logp = np.array([[0.2, 0.4, 7.0], [0.0, 0.0, 0.0]], np.float32)
    old = np.zeros((2, 3), np.float32)
    mask = np.array([[1, 1, 0], [0, 0, 0]], np.float32)
    np.testing.assert_allclose(
        token_ratio(logp, old, mask), [[np.exp(0.2), np.exp(0.4), 1.0], [1, 1, 1]], rtol=1e-6
    )
    ratio = jax.jit(gspo_ratio)(logp, old, mask)
    np.testing.assert_allclose(ratio, [np.exp(0.3), 1.0], rtol=1e-6)  # empty row -> 1, never NaN
    grad = jax.grad(lambda lp: gspo_ratio(lp, old, mask)[0])(jnp.asarray(logp))
    np.testing.assert_allclose(grad[0], [np.exp(0.3) / 2, np.exp(0.3) / 2, 0.0], rtol=1e-5)


def test_truncated_is_weights_token_and_sequence():
    old = np.zeros((2, 2), np.float32)
    sampler = np.array([[-np.log(3.0), np.log(2.0)], [-np.log(1.2), -np.log(1.5)]], np.float32)
    mask = np.array([[1, 1], [1, 0]], np.float32)
    token = truncated_is_weights(old, sampler, mask, "token", 2.0)
    np.testing.assert_allclose(token, [[2.0, 0.5], [1.2, 1.0]], rtol=1e-5)  # 3 capped at 2; 1 off-mask
    sequence = jax.jit(truncated_is_weights, static_argnums=(3, 4))(old, sampler, mask, "sequence", 2.0)
    # row 1: 3 * 0.5 = 1.5 on both tokens; row 2: only the counted token, 1.2
    np.testing.assert_allclose(sequence, [[1.5, 1.5], [1.2, 1.0]], rtol=1e-5)
    np.testing.assert_array_equal(truncated_is_clipped(old, sampler, mask, "token", 2.0), [[1, 0], [0, 0]])
    grad = jax.grad(lambda o: truncated_is_weights(o, sampler, mask).sum())(jnp.asarray(old))
    np.testing.assert_array_equal(grad, 0.0)  # a constant weight
    huge = truncated_is_weights(np.array([[500.0]]), np.array([[0.0]]), np.ones((1, 1)), "sequence", 2.0)
    assert float(huge[0, 0]) == 2.0  # no overflow to inf before the cap
    with pytest.raises(ValueError, match="allowed"):
        truncated_is_weights(old, sampler, mask, "geometric")


def test_kl_estimators_by_hand():
    logp, ref = np.array([-1.0, -2.0]), np.array([-1.5, -2.0])
    np.testing.assert_allclose(kl_estimate(logp, ref, "k1"), [0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(kl_estimate(logp, ref, "k2"), [0.125, 0.0], rtol=1e-6)
    np.testing.assert_allclose(kl_estimate(logp, ref, "k3"), [np.exp(-0.5) - 1 + 0.5, 0.0], rtol=1e-5)
    grad = jax.grad(lambda lp: jax.jit(kl_estimate, static_argnums=2)(lp, ref, "k3").sum())(jnp.asarray(logp))
    # d/dlogp [e^(ref-lp) - 1 - ref + lp] = 1 - e^(ref-lp)
    np.testing.assert_allclose(grad, [1 - np.exp(-0.5), 0.0], rtol=1e-5)
    with pytest.raises(ValueError, match="allowed"):
        kl_estimate(logp, ref, "k4")


def test_overlong_penalty_by_hand():
    lengths = np.array([10, 15, 16, 18, 20, 25])
    # max_len 20, buffer 5: 0 up to 15, then -(L - 15) / 5, -1 from 20 on
    np.testing.assert_allclose(overlong_penalty(lengths, 20, 5), [0, 0, -0.2, -0.6, -1.0, -1.0], rtol=1e-6)
    np.testing.assert_allclose(
        overlong_penalty(lengths, 20, 5, factor=0.5), [0, 0, -0.1, -0.3, -0.5, -0.5], rtol=1e-6
    )
    # no buffer: a hard step past the cap
    np.testing.assert_allclose(overlong_penalty(lengths, 20, 0), [0, 0, 0, 0, 0, -1.0])
    jitted = jax.jit(overlong_penalty, static_argnums=(1, 2, 3))
    np.testing.assert_allclose(jitted(jnp.float32(17.5), 20, 5, 1.0), -0.5, rtol=1e-6)
    grad = jax.grad(lambda n: overlong_penalty(n, 20, 5))(jnp.float32(17.0))
    np.testing.assert_allclose(grad, -0.2, rtol=1e-6)
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(lengths, 4, 5)


def test_apply_overlong_penalty_follows_config():
    rewards, lengths = np.array([1.0, 1.0, 0.0]), np.array([4, 15, 16])
    on = OverlongConfig(penalty=True, buffer_len=4, factor=1.0)
    np.testing.assert_allclose(apply_overlong_penalty(rewards, lengths, 16, on), [1.0, 0.25, -1.0], rtol=1e-6)
    np.testing.assert_allclose(
        apply_overlong_penalty(rewards, lengths, 16, OverlongConfig(penalty=False)), rewards
    )


def test_mask_truncated_zeroes_truncated_rows():
    mask = np.ones((3, 2), np.float32)
    out = jax.jit(mask_truncated)(mask, np.array([False, True, False]))
    np.testing.assert_array_equal(out, [[1, 1], [0, 0], [1, 1]])
    with pytest.raises(ValueError, match="truncated"):
        mask_truncated(mask, np.array([True]))


@pytest.mark.parametrize(
    "settings, reason",
    [
        ({"temperature": 0.0, "top_k": 0, "greedy": False}, "temperature"),
        ({"temperature": 1.0, "top_k": 1, "greedy": False}, "top_k=1"),
        ({"temperature": 1.0, "top_k": 0, "greedy": True}, "greedy=true"),
    ],
)
def test_warn_if_greedy_warns_and_returns_message(settings, reason, caplog):
    with pytest.warns(GreedySamplingWarning, match=reason):
        message = warn_if_greedy(**settings, context="rollout")
    assert reason in message and message.startswith("rollout")
    assert any(reason in record.getMessage() for record in caplog.records)


def test_warn_if_greedy_silent_for_sampling():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_greedy(temperature=1.0, top_k=0, greedy=False) is None
        assert warn_if_greedy(temperature=0.7, top_k=50, greedy=False) is None
