"""Choosing the next token from logits: temperature, top-k, top-p (nucleus), greedy, and the log-probs to report.

Two log-probs are reported for every chosen token y (see marin_rl/inference/sampler.py for which one RL uses):
- `logprob` = log softmax(logits / T)[y], the full temperature-scaled softmax. This is what the trainer computes
  (marin_rl.training.logprobs.response_logprobs at the same temperature), so the two are directly comparable.
- `sampling_logprob` = log of the probability y actually had in the distribution it was drawn from: the top-k /
  top-p truncated and renormalised softmax(logits / T). Equal to `logprob` when truncation is off; >= `logprob`
  when it is on (the kept mass is <= 1). 0 for greedy (argmax is chosen with probability 1).
Greedy (temperature 0 or the greedy flag) picks argmax(logits) and reports `logprob` at temperature 1.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class TokenChoice(NamedTuple):
    tokens: jax.Array  # i32[B]
    logprobs: jax.Array  # f32[B]: log softmax(logits / T)[token] (T = 1 for greedy)
    sampling_logprobs: jax.Array  # f32[B]: log-prob under the truncated distribution sampled from


def truncation_mask(scaled_logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """bool[B, V] keep-set: top-k, then the smallest prefix of those with mass >= top_p (Holtzman et al. 2020).

    top_k = 0 and top_p = 1 keep everything. As in HF/vLLM, top-p is taken over the top-k renormalised
    distribution. Ties with the threshold logit are kept (the set may exceed k by ties).
    """
    V = scaled_logits.shape[-1]
    sorted_desc = -jnp.sort(-scaled_logits, axis=-1)
    k = jnp.where(top_k > 0, jnp.minimum(top_k, V), V).astype(jnp.int32)
    in_top_k = jnp.arange(V) < k
    probs = jax.nn.softmax(jnp.where(in_top_k, sorted_desc, -jnp.inf), axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    # keep sorted entry i while the mass of the entries before it is < top_p: the first entry is always kept
    n_keep = jnp.minimum(jnp.sum(in_top_k & (mass_before < top_p), axis=-1), k)
    threshold = jnp.take_along_axis(sorted_desc, (n_keep - 1)[:, None], axis=-1)
    return scaled_logits >= threshold


def gumbel_key(step_key: jax.Array) -> jax.Array:
    """A key for one step's [B, V] Gumbel noise: XLA's RngBitGenerator seeded with 128 bits of a threefry key.

    4x faster than drawing the noise with threefry on the CPU (0.18 vs 0.76 ms per step at batch 32, vocab 100).
    "unsafe" in `unsafe_rbg` is about its split/fold_in, which are never used here: every step's seed comes from
    the threefry stream (fold_in per wave, then per decode slot).
    """
    return jax.random.wrap_key_data(jax.random.bits(step_key, (4,), jnp.uint32), impl="unsafe_rbg")


def choose_tokens(
    logits: jax.Array,
    key: jax.Array,
    temperature: jax.Array,
    greedy: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
) -> TokenChoice:
    """Sample y ~ softmax(trunc(logits / T)) per row of f32 logits[B, V] (argmax when greedy or T == 0).

    All knobs are traced values, so one compiled program serves every setting; the vocabulary sort of top-k/top-p
    sits behind a lax.cond and runs only when truncation is on.
    """
    greedy = jnp.logical_or(greedy, temperature <= 0.0)
    scaled = logits / jnp.where(greedy, 1.0, temperature)
    logp = jax.nn.log_softmax(scaled, axis=-1)
    truncate = jnp.logical_and(~greedy, jnp.logical_or(top_k > 0, top_p < 1.0))
    sample_logits = jax.lax.cond(
        truncate,
        lambda z: jnp.where(truncation_mask(z, top_k, top_p), z, -jnp.inf),
        lambda z: z,
        scaled,
    )
    # Gumbel-max (what jax.random.categorical computes), written out: 2x faster on the CPU in jax 0.10
    noise = jax.random.gumbel(gumbel_key(key), sample_logits.shape, jnp.float32)
    sampled = jnp.argmax(sample_logits + noise, axis=-1)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    picked = tokens[:, None]
    logprobs = jnp.take_along_axis(logp, picked, axis=-1)[:, 0]
    truncated = jnp.take_along_axis(jax.nn.log_softmax(sample_logits, axis=-1), picked, axis=-1)[:, 0]
    sampling = jnp.where(greedy, 0.0, jnp.where(truncate, truncated, logprobs))
    return TokenChoice(tokens, logprobs, sampling)
