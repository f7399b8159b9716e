"""Teacher-forced per-token log-probabilities (and entropies) of a Levanter LM, vocabulary-chunked.

Convention (shared with the sampler and the trainer): a row of `tokens` is prompt + response, LEFT-ALIGNED and
RIGHT-PADDED with the pad id; positions start at 0 at the first prompt token. Because attention is causal, padding
on the right never influences earlier positions, so no padding mask is needed; callers mask padded positions out
with their `loss_mask`.

Output alignment: out[:, t] = log p(tokens[:, t] | tokens[:, :t]) under softmax(logits / temperature), and
out[:, 0] = 0 (nothing predicts the first token). The LM head is applied in vocabulary chunks with a streaming
log-sum-exp, so a [B, S, V] logits tensor never exists for large vocabularies; the chunk loop is rematerialised
in the backward pass, so gradients stay O(B * S * chunk) in memory as well.
"""

from __future__ import annotations

from typing import NamedTuple

import haliax as hax
import jax
import jax.numpy as jnp
from haliax.nn.scan import Stacked
from levanter.layers.attention import AttentionMask
from levanter.models.llama import LlamaDecoderLayer, LlamaTransformer
from levanter.models.lm_model import LmHeadModel

BATCH_AXIS = "batch"
POS_AXIS = "position"
TOKEN_AXIS = "token"  # batch x position flattened (the unrolled MLP)


class TokenStats(NamedTuple):
    logp: jax.Array  # f32[B, S]: log p(tokens[:, t] | tokens[:, :t]); 0 at t = 0
    entropy: jax.Array  # f32[B, S]: entropy of the predictive distribution of token t; 0 at t = 0


def unrollable(model: LmHeadModel) -> bool:
    """True for a Levanter Llama whose stacked layers `unrolled_activations` can call one by one."""
    transformer = getattr(model, "transformer", None)
    if type(transformer) is not LlamaTransformer or not hasattr(transformer.layers, "unstacked"):
        return False
    return all(type(layer) is LlamaDecoderLayer for layer in transformer.layers.unstacked())


def unrolled_layer(layer, x: hax.NamedArray) -> hax.NamedArray:
    """LlamaDecoderLayer.__call__ (causal, no dropout key) with the MLP applied to (batch x position) flattened
    into one token axis: the MLP's weight gradients then contract a 2-D [tokens, width] array, which XLA's CPU
    backend transposes cheaply, instead of a 3-D one whose fused transposing copies were ~1/4 of the step."""
    residual = x
    attn_output = layer.self_attn(x=layer.input_layernorm(x), mask=AttentionMask.causal(), key=None, pos_ids=None)
    if layer.post_attn_layernorm is not None:
        attn_output = layer.post_attn_layernorm(attn_output)
    x = residual + attn_output
    h_flat = hax.flatten_axes(layer.post_attention_layernorm(x), (BATCH_AXIS, POS_AXIS), TOKEN_AXIS)
    mlp_output = hax.unflatten_axis(
        layer.mlp(h_flat, key=None), TOKEN_AXIS, (x.resolve_axis(BATCH_AXIS), x.resolve_axis(POS_AXIS))
    )
    if layer.post_mlp_layernorm is not None:
        mlp_output = layer.post_mlp_layernorm(mlp_output)
    return x + mlp_output


def unstacked_layers(layers: Stacked) -> list:
    """`layers.unstacked()` with each layer cut out of the stacked weights by a static slice.

    Why: Haliax's unstacking indexes with jnp.take, a gather with an out-of-bounds fill; in the trainer step XLA's CPU
    backend ran it as a copy of every weight through a select, and its gradient through a pad, each step.
    """

    def layer(i: int):
        def cut(x):
            if isinstance(x, hax.NamedArray):
                if not hax.selects_axis(x.axes, layers.Block):
                    return x
                axis = x.axis_indices(layers.Block)
                sliced = jax.lax.index_in_dim(x.array, i, axis, keepdims=False)
                return hax.auto_sharded(hax.named(sliced, x.axes[:axis] + x.axes[axis + 1 :]))
            if isinstance(x, jax.Array):
                return jax.lax.index_in_dim(x, i, 0, keepdims=False)
            return x

        return jax.tree.map(cut, layers.stacked, is_leaf=lambda x: isinstance(x, hax.NamedArray))

    return [layer(i) for i in range(layers.Block.size)]


def unrolled_activations(model: LmHeadModel, ids: hax.NamedArray) -> hax.NamedArray:
    """LlamaLMHeadModel.activations with the layer scan written out as a Python loop (the same modules and math).

    Why: XLA's CPU backend fuses the backward pass's weight-gradient transposes with dynamic slices of the scan's
    stacked residuals into slow strided copies; with straight-line layers those slices disappear.
    """
    x = model.embeddings.embed(ids)
    for layer in unstacked_layers(model.transformer.layers):
        x = unrolled_layer(layer, x)
    return model.transformer.norm(x)


def hidden_states(model: LmHeadModel, tokens: jax.Array, unroll_layers: bool = False) -> jax.Array:
    """Final (post-norm) hidden states f32/bf16[B, S, E] of a causal forward pass over int32 tokens[B, S];
    `unroll_layers` traces Llama layers one by one instead of Levanter's scan (other models: the scan)."""
    ids = hax.named(tokens.astype(jnp.int32), (BATCH_AXIS, POS_AXIS))
    if unroll_layers and unrollable(model):
        h = unrolled_activations(model, ids)
    else:
        h = model.activations(ids, AttentionMask.causal(), key=None)
    if isinstance(h, tuple):  # MoE models return (activations, aux_loss)
        h = h[0]
    return h.rearrange((BATCH_AXIS, POS_AXIS, model.Embed.name)).array


def lm_head_matrix(model: LmHeadModel) -> jax.Array:
    """The LM head as a plain [V, E] matrix (rows are vocabulary entries)."""
    return model.get_lm_head().rearrange((model.Vocab.name, model.Embed.name)).array


def _streaming_stats(
    h: jax.Array, w: jax.Array, targets: jax.Array, temperature: float, vocab_chunk: int | None
) -> TokenStats:
    """log p(target) = z_target - logsumexp(z), H = logsumexp(z) - sum softmax(z) z, with z = h W^T / T.

    Online log-sum-exp over vocabulary chunks (Milakov & Gimelshein 2018, "Online normalizer calculation for
    softmax"), carrying (running max m, sum exp(z - m), sum exp(z - m) z) so H comes out of the same pass.
    """
    h32 = h.astype(jnp.float32)
    w32 = w.astype(jnp.float32)
    inv_t = 1.0 / temperature
    V = w32.shape[0]

    if vocab_chunk is None or vocab_chunk >= V:
        z = jnp.einsum("bse,ve->bsv", h32, w32) * inv_t
        lse = jax.nn.logsumexp(z, axis=-1)
        p = jnp.exp(z - lse[..., None])
        entropy = lse - jnp.sum(p * z, axis=-1)
        # one-hot select instead of a gather: its backward is dense (no scatter), fast for small vocabularies
        target_logit = jnp.sum(z * jax.nn.one_hot(targets, V, dtype=z.dtype), axis=-1)
        return TokenStats(target_logit - lse, entropy)

    # the target's logit from its own LM-head row: [B, S, E] instead of [B, S, V]
    target_logit = jnp.einsum("bse,bse->bs", h32, jnp.take(w32, targets, axis=0)) * inv_t
    n_chunks = -(-V // vocab_chunk)
    pad = n_chunks * vocab_chunk - V
    w_chunks = jnp.pad(w32, ((0, pad), (0, 0))).reshape(n_chunks, vocab_chunk, -1)
    valid = (jnp.arange(n_chunks * vocab_chunk) < V).reshape(n_chunks, vocab_chunk)

    @jax.checkpoint  # recompute chunk logits in the backward pass instead of storing [B, S, V]
    def step(carry, chunk):
        m, s, sz = carry
        w_c, valid_c = chunk
        z = jnp.einsum("bse,ve->bsv", h32, w_c) * inv_t
        z = jnp.where(valid_c, z, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(z, axis=-1))
        scale = jnp.exp(m - m_new)
        e = jnp.exp(z - m_new[..., None])
        z_safe = jnp.where(valid_c, z, 0.0)  # 0 * -inf would be nan
        s_new = s * scale + jnp.sum(e, axis=-1)
        sz_new = sz * scale + jnp.sum(e * z_safe, axis=-1)
        return (m_new, s_new, sz_new), None

    B, S = targets.shape
    init = (
        jnp.full((B, S), -jnp.inf, jnp.float32),
        jnp.zeros((B, S), jnp.float32),
        jnp.zeros((B, S), jnp.float32),
    )
    # the first chunk always holds real entries, so m is finite after it and exp(-inf - m) = 0 is safe
    (m, s, sz), _ = jax.lax.scan(step, init, (w_chunks, valid))
    lse = m + jnp.log(s)
    entropy = lse - sz / s
    return TokenStats(target_logit - lse, entropy)


def token_stats(
    model: LmHeadModel,
    tokens: jax.Array,
    temperature: float = 1.0,
    vocab_chunk: int | None = None,
    unroll_layers: bool = False,
) -> TokenStats:
    """Per-token log-probs and predictive entropies f32[B, S] of right-padded tokens (see module docstring)."""
    if temperature <= 0:
        raise ValueError(
            f"temperature={temperature} must be > 0 for log-probabilities (greedy has no density)"
        )
    h = hidden_states(model, tokens, unroll_layers)
    w = lm_head_matrix(model)
    # position t-1 predicts token t: drop the last hidden state, drop the first target
    stats = _streaming_stats(h[:, :-1], w, tokens[:, 1:].astype(jnp.int32), temperature, vocab_chunk)
    zero = jnp.zeros((tokens.shape[0], 1), jnp.float32)
    return TokenStats(
        jnp.concatenate([zero, stats.logp], axis=1), jnp.concatenate([zero, stats.entropy], axis=1)
    )


def response_logprobs(
    model: LmHeadModel, tokens: jax.Array, temperature: float = 1.0, vocab_chunk: int | None = None
) -> jax.Array:
    """f32[B, S]: out[:, t] = log softmax(logits_{t-1} / temperature)[tokens[:, t]], out[:, 0] = 0."""
    return token_stats(model, tokens, temperature, vocab_chunk).logp


def token_entropy(
    model: LmHeadModel, tokens: jax.Array, temperature: float = 1.0, vocab_chunk: int | None = None
) -> jax.Array:
    """f32[B, S]: entropy H_t = -sum_v p_v log p_v of the distribution that token t was drawn from; 0 at t = 0."""
    return token_stats(model, tokens, temperature, vocab_chunk).entropy


def full_logits(model: LmHeadModel, tokens: jax.Array) -> jax.Array:
    """f32[B, S, V] logits of the stock Levanter forward (reference for tests and small-vocab tools only)."""
    ids = hax.named(tokens.astype(jnp.int32), (BATCH_AXIS, POS_AXIS))
    logits = model(ids, AttentionMask.causal())
    return logits.rearrange((BATCH_AXIS, POS_AXIS, model.Vocab.name)).array.astype(jnp.float32)
