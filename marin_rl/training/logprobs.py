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
from levanter.layers.attention import AttentionMask, dot_product_attention
from levanter.models.llama import LlamaDecoderLayer, LlamaTransformer
from levanter.models.lm_model import LmHeadModel

from marin_rl.training.shared_prompts import SharedPromptRows

BATCH_AXIS = "batch"
POS_AXIS = "position"
TOKEN_AXIS = "token"  # batch x position flattened (the unrolled MLP)
GENERATION_AXIS = "generation"  # the responses to one prompt (shared-prompt layout)
KEY_POS_AXIS = "key_position"  # Levanter attention's name for the key side of "position"


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
    attn_output = layer.self_attn(x=layer.input_layernorm(x), mask=AttentionMask.causal(), key=None, pos_ids=None)
    return mlp_residual(layer, attention_residual(layer, x, attn_output))


def attention_residual(layer, x: hax.NamedArray, attn_output: hax.NamedArray) -> hax.NamedArray:
    """x + the layer's attention output (after its post-attention norm, where the model has one)."""
    if layer.post_attn_layernorm is not None:
        attn_output = layer.post_attn_layernorm(attn_output)
    return x + attn_output


def mlp_residual(layer, x: hax.NamedArray) -> hax.NamedArray:
    """x + the layer's MLP of its post-attention norm, applied to every token axis flattened into one."""
    token_axes = tuple(a for a in x.axes if a.name in (BATCH_AXIS, GENERATION_AXIS, POS_AXIS))
    h_flat = hax.flatten_axes(layer.post_attention_layernorm(x), tuple(a.name for a in token_axes), TOKEN_AXIS)
    mlp_output = hax.unflatten_axis(layer.mlp(h_flat, key=None), TOKEN_AXIS, token_axes)
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


def attend(attn, q: hax.NamedArray, k: hax.NamedArray, v: hax.NamedArray, mask: AttentionMask) -> hax.NamedArray:
    """Levanter Attention.__call__ after its q/k/v projections: keys and values come with KEY_POS_AXIS already, so
    a query may attend to keys computed elsewhere (a shared prompt's)."""
    q = q.rearrange((..., "kv_head", "q_heads_per_group", POS_AXIS, "head_size"))
    k = k.rearrange((..., "kv_head", KEY_POS_AXIS, "head_size"))
    v = v.rearrange((..., "kv_head", KEY_POS_AXIS, "head_size"))
    c = attn.config
    out = dot_product_attention(
        POS_AXIS, KEY_POS_AXIS, "head_size", q, k, v, mask,
        attention_dtype=jnp.float32 if c.upcast_attn else q.dtype, attn_backend=c.attn_backend,
        flash_block_size=c.flash_attention_block_size, scaling_factor=c.scaling_factor,
        logits_soft_cap=c.logits_soft_cap, inference=True, prng=None,
    )
    out = out.flatten_axes(("kv_head", "q_heads_per_group"), "heads").astype(q.dtype)
    return attn.o_proj(out, key=None)


def shared_prompt_layer(
    layer, x_P: hax.NamedArray, x_R: hax.NamedArray, response_pos: hax.NamedArray, response_mask: AttentionMask
) -> tuple[hax.NamedArray, hax.NamedArray]:
    """One Llama layer over prompts [batch, position] and their responses [batch, generation, position]: prompts
    attend causally to themselves; responses to their prompt's keys and their own earlier tokens."""
    attn = layer.self_attn
    q_P, k_P, v_P = attn._compute_qkv(layer.input_layernorm(x_P), key=None)
    q_R, k_R, v_R = attn._compute_qkv(layer.input_layernorm(x_R), key=None, pos_ids=response_pos)
    k_P, v_P, k_R, v_R = (a.rename({POS_AXIS: KEY_POS_AXIS}) for a in (k_P, v_P, k_R, v_R))
    out_P = attend(attn, q_P, k_P, v_P, AttentionMask.causal())
    generations = x_R.resolve_axis(GENERATION_AXIS)
    keys, values = (
        hax.concatenate(KEY_POS_AXIS, [hax.broadcast_axis(prompt, generations).rearrange(own.axes), own])
        for prompt, own in ((k_P, k_R), (v_P, v_R))
    )
    out_R = attend(attn, q_R, keys, values, response_mask)
    x_P = mlp_residual(layer, attention_residual(layer, x_P, out_P))
    x_R = mlp_residual(layer, attention_residual(layer, x_R, out_R))
    return x_P, x_R


def shared_prompt_hidden(model: LmHeadModel, rows: SharedPromptRows) -> jax.Array:
    """Final hidden states f32/bf16[G*P + G*N*T, E] of the shared-prompt layout (training/shared_prompts.py), in
    its flat token order: the Llama layers of `unrolled_activations`, each prompt computed once."""
    G, P = rows.prompts_GP.shape
    _, N, T = rows.responses_GNT.shape
    prompt_ids = hax.named(rows.prompts_GP.astype(jnp.int32), (BATCH_AXIS, POS_AXIS))
    response_ids = hax.named(rows.responses_GNT.astype(jnp.int32), (BATCH_AXIS, GENERATION_AXIS, POS_AXIS))
    lens_G = rows.prompt_lens_G.astype(jnp.int32)
    positions_GT = lens_G[:, None] + jnp.arange(T, dtype=jnp.int32)  # a response continues its prompt
    response_pos = hax.named(positions_GT, (BATCH_AXIS, POS_AXIS))
    sees_prompt_GTP = jnp.broadcast_to(jnp.arange(P) < lens_G[:, None, None], (G, T, P))  # its real tokens
    sees_own_GTT = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (G, T, T))  # causal
    response_mask = AttentionMask(explicit_mask=hax.named(
        jnp.concatenate([sees_prompt_GTP, sees_own_GTT], axis=-1), (BATCH_AXIS, POS_AXIS, KEY_POS_AXIS)
    ))
    x_P = model.embeddings.embed(prompt_ids)
    x_R = model.embeddings.embed(response_ids)
    for layer in unstacked_layers(model.transformer.layers):
        x_P, x_R = shared_prompt_layer(layer, x_P, x_R, response_pos, response_mask)
    E = model.Embed.name
    h_P = model.transformer.norm(x_P).rearrange((BATCH_AXIS, POS_AXIS, E)).array
    h_R = model.transformer.norm(x_R).rearrange((BATCH_AXIS, GENERATION_AXIS, POS_AXIS, E)).array
    return jnp.concatenate([h_P.reshape(G * P, -1), h_R.reshape(G * N * T, -1)])


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
    shared: SharedPromptRows | None = None,
) -> TokenStats:
    """Per-token log-probs and predictive entropies f32[B, S] of right-padded tokens (see module docstring); with
    `shared` (the same rows in the shared-prompt layout) the forward pass runs over that layout instead."""
    if temperature <= 0:
        raise ValueError(
            f"temperature={temperature} must be > 0 for log-probabilities (greedy has no density)"
        )
    if shared is None:
        # position t-1 predicts token t: drop the last hidden state, drop the first target
        h_pred = hidden_states(model, tokens, unroll_layers)[:, :-1]
    elif unroll_layers and unrollable(model):  # the same hidden states, each prompt computed once
        h_pred = shared_prompt_hidden(model, shared)[shared.source_BL[:, 1:]]
    else:
        raise ValueError(
            "shared-prompt rows run the unrolled Llama layers: hardware.trainer_shared_prompts needs "
            "hardware.trainer_unroll_layers and a Levanter Llama model"
        )
    w = lm_head_matrix(model)
    stats = _streaming_stats(h_pred, w, tokens[:, 1:].astype(jnp.int32), temperature, vocab_chunk)
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
