"""Loss aggregation: hand values, the regression-analysis table, micro-batch invariance (hypothesis)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marin_rl.objectives import (
    AGGREGATION_MODES,
    Normalizer,
    aggregate_with_normalizer,
    batch_normalizer,
)

PER_TOKEN = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
MASK = np.array([[1, 1, 0], [1, 1, 1]], np.float32)
# L = [3, 15], n = [2, 3], N = 5, B = 2, L_max = 4
HAND_VALUES = {
    "token_mean": 18 / 5,
    "seq_mean_token_mean": (3 / 2 + 15 / 3) / 2,
    "seq_mean_token_sum_norm": (3 / 4 + 15 / 4) / 2,
    "token_sum": 18.0,
    "batch_scaled_token_mean": (3 / 5 + 15 / 5) / 2,
}
BUDGET = 4


def aggregate_loss(per_token, mask, mode, fixed_budget=None):
    """A whole batch aggregated on its own normalizer: what the train step does when there is one micro-batch."""
    return aggregate_with_normalizer(per_token, mask, mode, batch_normalizer(mask, fixed_budget))



def budget_for(mode):
    return BUDGET if mode == "seq_mean_token_sum_norm" else None


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_hand_values(mode):
    value = aggregate_loss(PER_TOKEN, MASK, mode, budget_for(mode))
    np.testing.assert_allclose(value, HAND_VALUES[mode], rtol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_jit_bool_mask_and_empty_row(mode):
    """Works under jit with a bool mask; an all-zero row (holding NaN/inf) changes nothing and yields no NaN."""
    fn = jax.jit(aggregate_loss, static_argnums=(2, 3))
    with_empty = np.vstack([PER_TOKEN, [np.nan, np.inf, -np.inf]])
    mask_empty = np.vstack([MASK, np.zeros(3)]).astype(bool)
    value = fn(with_empty, mask_empty, mode, budget_for(mode))
    np.testing.assert_allclose(value, HAND_VALUES[mode], rtol=1e-6)
    grad = jax.grad(lambda o: aggregate_loss(o, mask_empty, mode, budget_for(mode)))(jnp.asarray(with_empty))
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[2], 0.0)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_all_masked_batch_is_zero_without_nan(mode):
    def aggregate(per_token):
        return aggregate_loss(per_token, np.zeros((2, 3)), mode, budget_for(mode))

    value, grad = jax.value_and_grad(aggregate)(jnp.ones((2, 3)))
    assert float(value) == 0.0
    np.testing.assert_array_equal(grad, 0.0)


# The regression analysis: B = 2 answers of 100 and 500 tokens, N = 600.
LENGTHS = (100, 500)
TABLE = {
    "token_mean": (1 / 600, 1 / 600),
    "batch_scaled_token_mean": (1 / 1200, 1 / 1200),
    "seq_mean_token_mean": (1 / 200, 1 / 1000),  # 1 / (B * n_b)
    "token_sum": (1.0, 1.0),
    "seq_mean_token_sum_norm": (1 / (2 * 500), 1 / (2 * 500)),  # L_max = 500
}


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_two_example_table_from_regression_analysis(mode):
    mask = np.zeros((2, 500), np.float32)
    mask[0, : LENGTHS[0]] = 1
    mask[1, : LENGTHS[1]] = 1
    per_token = np.random.default_rng(0).normal(size=mask.shape).astype(np.float32)
    budget = 500 if mode == "seq_mean_token_sum_norm" else None
    grad = jax.grad(lambda o: aggregate_loss(o, mask, mode, budget))(jnp.asarray(per_token))
    short, long_ = TABLE[mode]
    np.testing.assert_allclose(grad[0, : LENGTHS[0]], short, rtol=1e-5)
    np.testing.assert_allclose(grad[1], long_, rtol=1e-5)
    np.testing.assert_array_equal(grad[0, LENGTHS[0] :], 0.0)


def test_errors_name_allowed_values():
    with pytest.raises(ValueError, match="allowed.*token_mean"):
        aggregate_loss(PER_TOKEN, MASK, "mean")
    with pytest.raises(ValueError, match="fixed_budget"):
        aggregate_loss(PER_TOKEN, MASK, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="shape"):
        aggregate_loss(PER_TOKEN, MASK[:, :2], "token_mean")


def test_normalizer_is_a_pytree_with_static_budget():
    normalizer = batch_normalizer(MASK, fixed_budget=BUDGET)
    assert float(normalizer.total_tokens) == 5 and float(normalizer.total_sequences) == 2
    leaves, treedef = jax.tree_util.tree_flatten(normalizer)
    assert len(leaves) == 2
    assert jax.tree_util.tree_unflatten(treedef, leaves).fixed_budget == BUDGET
    fn = jax.jit(lambda o, n: aggregate_with_normalizer(o, MASK, "seq_mean_token_sum_norm", n))
    np.testing.assert_allclose(fn(PER_TOKEN, normalizer), HAND_VALUES["seq_mean_token_sum_norm"], rtol=1e-6)
    empty_row = batch_normalizer(np.vstack([MASK, np.zeros(3)]))
    assert float(empty_row.total_sequences) == 2  # a row without counted tokens is not an answer


def test_per_micro_batch_normalization_is_the_accumulation_bug():
    """Control: normalizing each micro-batch by its own N (the common bug) does change the gradient."""
    mask = np.array([[1, 0, 0, 0], [1, 1, 1, 1]], np.float32)
    full = jax.grad(lambda o: aggregate_loss(o, mask, "token_mean"))(jnp.ones((2, 4)))
    own = [
        jax.grad(lambda o, m=m: aggregate_loss(o, m[None], "token_mean"))(jnp.ones((1, 4)))[0] for m in mask
    ]
    assert not np.allclose(np.stack(own) / 2, full)  # averaged per-micro-batch means weigh the short row 4x
    normalizer = batch_normalizer(mask)
    shared = [
        jax.grad(lambda o, m=m: aggregate_with_normalizer(o, m[None], "token_mean", normalizer))(
            jnp.ones((1, 4))
        )[0]
        for m in mask
    ]
    np.testing.assert_allclose(np.stack(shared), full, rtol=1e-6)


# Fixed batch shape and all modes in one program, so the jit caches are reused across examples: only the row
# counts of the micro-batches vary (empty rows cover batches with fewer answers).
ROWS, TOKENS = 6, 4
BUDGET_FOR_PROPERTY = 3


def _model_per_token(theta, features):
    """A tiny differentiable 'model': per-token loss = tanh(features @ theta) (features [B, T, 3])."""
    return jnp.tanh(features @ theta)


@jax.jit
def _full_batch_all_modes(theta, features, mask):
    """Values [modes] and gradients [modes, 3] of the whole batch under every aggregation mode."""

    def values(t):
        per_token = _model_per_token(t, features)
        return jnp.stack([aggregate_loss(per_token, mask, m, BUDGET_FOR_PROPERTY) for m in AGGREGATION_MODES])

    return values(theta), jax.jacrev(values)(theta)


@jax.jit
def _micro_batch_all_modes(theta, features, mask, normalizer):
    def values(t):
        per_token = _model_per_token(t, features)
        return jnp.stack(
            [aggregate_with_normalizer(per_token, mask, m, normalizer) for m in AGGREGATION_MODES]
        )

    return values(theta), jax.jacrev(values)(theta)


@st.composite
def batches(draw):
    mask = np.array(draw(st.lists(st.booleans(), min_size=ROWS * TOKENS, max_size=ROWS * TOKENS)), np.float32)
    num_micro = draw(st.integers(1, ROWS))
    assignment = np.array(draw(st.lists(st.integers(0, num_micro - 1), min_size=ROWS, max_size=ROWS)))
    seed = draw(st.integers(0, 2**16))
    return mask.reshape(ROWS, TOKENS), assignment, seed


@settings(max_examples=25, deadline=None)
@given(batches())
def test_micro_batch_gradients_sum_to_full_batch_gradient(case):
    """For every mode, grad(full batch) == sum of micro-batch grads with the whole batch's normalizer, any split."""
    mask, assignment, seed = case
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(*mask.shape, 3)).astype(np.float32)
    theta = jnp.asarray(rng.normal(size=3).astype(np.float32))
    normalizer = batch_normalizer(mask, BUDGET_FOR_PROPERTY)  # once, on the whole batch

    full_values, full_grads = _full_batch_all_modes(theta, features, mask)
    accumulated_values, accumulated_grads = np.zeros_like(full_values), np.zeros_like(full_grads)
    for micro in np.unique(assignment):  # any split of rows, contiguous or not
        rows = np.flatnonzero(assignment == micro)
        values, grads = _micro_batch_all_modes(theta, features[rows], mask[rows], normalizer)
        accumulated_values, accumulated_grads = accumulated_values + values, accumulated_grads + grads
    for i, mode in enumerate(AGGREGATION_MODES):
        np.testing.assert_allclose(accumulated_values[i], full_values[i], rtol=1e-5, atol=1e-6, err_msg=mode)
        np.testing.assert_allclose(accumulated_grads[i], full_grads[i], rtol=1e-5, atol=1e-6, err_msg=mode)
    assert np.all(np.isfinite(full_grads))


def test_normalizer_constructor_fields():
    normalizer = Normalizer(total_tokens=jnp.float32(10), total_sequences=jnp.float32(2))
    assert normalizer.fixed_budget is None
    value = aggregate_with_normalizer(np.ones((1, 5)), np.ones((1, 5)), "batch_scaled_token_mean", normalizer)
    np.testing.assert_allclose(value, 5 / (10 * 2))
