"""Turning a [B, T] per-token loss into one scalar: the five normalizations, micro-batch safe.

With per-token loss o[b,t], mask m[b,t], L_b = sum_t o*m, n_b = sum_t m, N = sum_b n_b and B = the number of
sequences with at least one counted token:

    token_mean               sum_b L_b / N            (DAPO, Yu et al. 2025 sec. 3.3: every token weighs the same)
    seq_mean_token_mean      mean_b (L_b / n_b)       (GRPO, Shao et al. 2024: every answer weighs the same)
    seq_mean_token_sum_norm  mean_b (L_b / L_max)     (Dr. GRPO, Liu et al. 2025: a fixed token budget)
    token_sum                sum_b L_b                (no normalization)
    batch_scaled_token_mean  mean_b (L_b / N)         (the seed system's restored form = token_mean / B)

Every mode is a sum over sequences of a per-sequence term divided by batch-wide constants (N, B, L_max). Gradient
accumulation is therefore exact when each micro-batch is aggregated with the WHOLE batch's constants (a
`Normalizer`, see `batch_normalizer`) and the micro-batch losses are summed; normalizing each micro-batch by its own
token count is the most reported accumulation bug in verl and similar systems; `aggregate_with_normalizer` rules it
out.

Rows whose mask is all zero (filtered groups, padding rows, masked truncated answers) contribute nothing and do not
count in B, so masking a row out is exactly the same as dropping it from the batch.
"""

from __future__ import annotations

import dataclasses
from typing import get_args

import jax
import jax.numpy as jnp

from marin_rl.objectives.config import AggregationMode
from marin_rl.objectives.xp import as_float

AGGREGATION_MODES: tuple[str, ...] = get_args(AggregationMode)


def check_aggregation_mode(mode: str, fixed_budget: float | None) -> None:
    """Raise a ValueError naming the allowed values for an unknown mode or a missing/invalid fixed budget."""
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"loss.aggregation={mode!r} is not a known mode; allowed: {list(AGGREGATION_MODES)}")
    if mode == "seq_mean_token_sum_norm":
        if fixed_budget is None:
            raise ValueError(
                "loss.aggregation=seq_mean_token_sum_norm needs loss.fixed_budget (a token count)"
            )
        if not fixed_budget > 0:
            raise ValueError(f"loss.fixed_budget={fixed_budget!r} must be > 0")


def safe_divide(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """numerator / denominator where denominator > 0, else 0; NaN-free in value and gradient."""
    positive = denominator > 0
    return jnp.where(positive, numerator / jnp.where(positive, denominator, 1), 0)


def _as_float(x) -> jax.Array:
    """A float array (at least float32, so bf16 losses are summed in float32); accepts NumPy, lists, bools."""
    return as_float(x, jnp)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Normalizer:
    """Batch-wide constants of an aggregation, computed once on the whole batch and shared by its micro-batches.

    total_tokens: N = sum of the mask over the whole batch; total_sequences: B = rows of the whole batch with at
    least one counted token; fixed_budget: L_max of seq_mean_token_sum_norm (static: part of the jit cache key).
    """

    total_tokens: jax.Array
    total_sequences: jax.Array
    fixed_budget: float | None = dataclasses.field(default=None, metadata=dict(static=True))


def batch_normalizer(mask, fixed_budget: float | None = None) -> Normalizer:
    """Normalizer of a whole batch: N = sum_{b,t} m, B = #{b : sum_t m[b] > 0}."""
    mask = _as_float(mask)
    if mask.ndim != 2:
        raise ValueError(f"mask must be [batch, tokens], got shape {mask.shape}")
    tokens_per_row = mask.sum(axis=-1)
    return Normalizer(
        total_tokens=tokens_per_row.sum(),
        total_sequences=(tokens_per_row > 0).sum().astype(mask.dtype),
        fixed_budget=fixed_budget,
    )


def aggregate_with_normalizer(per_token, mask, mode: str, normalizer: Normalizer) -> jax.Array:
    """This (micro-)batch's share of the full-batch aggregate; summing the shares of a split batch gives the total.

    Formulas: see the module docstring, with N, B, L_max taken from `normalizer` (the whole batch).
    """
    check_aggregation_mode(mode, normalizer.fixed_budget)
    per_token, mask = _as_float(per_token), _as_float(mask)
    if per_token.shape != mask.shape:
        raise ValueError(f"per_token shape {per_token.shape} != mask shape {mask.shape}")
    # where(), not multiply: a NaN/inf in a masked-out slot (padding) must not leak into the sum or its gradient.
    row_sums = jnp.where(mask > 0, per_token * mask, 0).sum(axis=-1)  # L_b
    total_tokens = normalizer.total_tokens
    total_sequences = normalizer.total_sequences
    if mode == "token_mean":
        return safe_divide(row_sums.sum(), total_tokens)
    if mode == "token_sum":
        return row_sums.sum()
    if mode == "batch_scaled_token_mean":
        return safe_divide(row_sums.sum(), total_tokens * total_sequences)
    if mode == "seq_mean_token_mean":
        per_sequence = safe_divide(row_sums, mask.sum(axis=-1))  # L_b / n_b, 0 for empty rows
        return safe_divide(per_sequence.sum(), total_sequences)
    # seq_mean_token_sum_norm
    return safe_divide(row_sums.sum() / normalizer.fixed_budget, total_sequences)


def masked_token_mean(values, mask, normalizer: Normalizer) -> jax.Array:
    """sum_{b,t} v*m / N with the whole batch's N: a token-mean metric that sums exactly over micro-batches."""
    return aggregate_with_normalizer(values, mask, "token_mean", normalizer)


def masked_sequence_mean(per_sequence, mask, normalizer: Normalizer) -> jax.Array:
    """sum over rows with a counted token of v_b / B (whole batch's B): a per-answer metric, additive over micro-batches."""
    per_sequence, mask = _as_float(per_sequence), _as_float(mask)
    active = mask.sum(axis=-1) > 0
    return safe_divide(jnp.where(active, per_sequence, 0).sum(), normalizer.total_sequences)
