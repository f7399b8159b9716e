"""True per-token entropy of the policy, H = logsumexp(z) - sum_v softmax(z)_v z_v, from logits z = h W / T.

For large vocabularies (128k x 4k tokens) the [.., V] logits do not fit, so `chunked_entropy` streams over vocabulary
chunks with an online log-sum-exp (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"): it keeps
a running max m, s = sum exp(z - m) and u = sum exp(z - m) (z - m), rescaling both when m grows; then
H = log s - u / s. Each chunk is rematerialized in the backward pass (jax.checkpoint), so neither direction
holds more than one [.., chunk] block of logits.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from marin_rl.objectives.aggregation import _as_float

# lm_head(hidden [..., D], start: int32 scalar, size: static int) -> logits [..., size] of vocab ids start..start+size.
LogitsFn = Callable[[jax.Array, jax.Array, int], jax.Array]


def entropy_from_logits(logits, temperature: float = 1.0) -> jax.Array:
    """H = logsumexp(z) - sum softmax(z) z over the last axis, z = logits / temperature (the direct computation)."""
    z = _as_float(logits) / temperature
    log_probs = jax.nn.log_softmax(z, axis=-1)
    return -(jnp.exp(log_probs) * log_probs).sum(axis=-1)


def _logits_fn(lm_head, vocab_size: int | None) -> tuple[LogitsFn, int]:
    if callable(lm_head):
        if vocab_size is None:
            raise ValueError("chunked_entropy: pass vocab_size when lm_head is a callable")
        return lm_head, int(vocab_size)
    weight = jnp.asarray(lm_head)
    if weight.ndim != 2:
        raise ValueError(f"chunked_entropy: lm_head must be [D, V] or a callable, got shape {weight.shape}")

    def logits_of_chunk(hidden, start, size):
        columns = jax.lax.dynamic_slice_in_dim(weight, start, size, axis=1)
        return hidden @ columns

    return logits_of_chunk, weight.shape[1]


def _merge(state, z_chunk):
    """Fold a [..., c] chunk of logits into the running (max m, s = sum e^(z-m), u = sum e^(z-m) (z-m))."""
    running_max, sum_exp, sum_exp_shifted = state
    new_max = jax.lax.stop_gradient(jnp.maximum(running_max, z_chunk.max(axis=-1)))  # H does not depend on m
    shift = running_max - new_max  # <= 0
    rescale = jnp.exp(shift)
    shifted = z_chunk - new_max[..., None]
    e = jnp.exp(shifted)
    return (
        new_max,
        sum_exp * rescale + e.sum(axis=-1),
        # old terms: e^(z-m') (z-m') = rescale * e^(z-m) ((z-m) + shift)
        rescale * (sum_exp_shifted + shift * sum_exp) + (e * shifted).sum(axis=-1),
    )


def chunked_entropy(
    hidden,
    lm_head,
    chunk_size: int,
    temperature: float = 1.0,
    *,
    vocab_size: int | None = None,
) -> jax.Array:
    """Entropy of softmax(hidden @ lm_head / T) per position, streaming over vocab chunks of `chunk_size` (module doc).

    hidden: [..., D]; lm_head: a [D, V] matrix or a callable (hidden, start, size) -> logits [..., size]
    (then vocab_size is required). Returns [...]; the full [..., V] logits never materialize.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunked_entropy: chunk_size={chunk_size} must be > 0")
    if not temperature > 0:
        raise ValueError(f"chunked_entropy: temperature={temperature} must be > 0")
    hidden = _as_float(hidden)
    logits_of_chunk, vocab = _logits_fn(lm_head, vocab_size)
    chunk_size = min(chunk_size, vocab)
    num_full, tail = divmod(vocab, chunk_size)

    def scaled_chunk(start, size):
        return _as_float(logits_of_chunk(hidden, start, size)) / temperature

    # Start from the first chunk rather than from max = -inf, so no exp(-inf) rescale ever enters a gradient.
    first = scaled_chunk(jnp.int32(0), chunk_size)
    first_max = jax.lax.stop_gradient(first.max(axis=-1))  # a stabilizer only: H does not depend on it
    shifted = first - first_max[..., None]
    e = jnp.exp(shifted)
    state = (first_max, e.sum(axis=-1), (e * shifted).sum(axis=-1))

    @jax.checkpoint
    def body(state, chunk_index):
        return _merge(state, scaled_chunk(chunk_index * chunk_size, chunk_size)), None

    if num_full > 1:
        state, _ = jax.lax.scan(body, state, jnp.arange(1, num_full, dtype=jnp.int32))
    if tail:
        state = _merge(state, scaled_chunk(jnp.int32(num_full * chunk_size), tail))
    _, sum_exp, sum_exp_shifted = state
    # H = log Z - E[z] = log s - u / s: both terms relative to the max, so no large logsumexp cancels against E[z].
    return jnp.log(sum_exp) - sum_exp_shifted / sum_exp
