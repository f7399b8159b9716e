"""KV-cache forward pass of a Levanter Llama-family model (Llama, Qwen2/Qwen3, Mistral layers), jit-friendly.

Cache layout: one dense cache row per sequence, per layer `k: [batch, kv_head, head_size, slot]` (keys stored
transposed) and `v: [batch, kv_head, slot, head_size]`. Prompts are
LEFT-padded so that every prompt of a batch ends at the same slot; a row's RoPE position is `slot - pad[row]`, so
positions start at 0 at the first prompt token exactly as in the trainer's right-padded forward
(marin_rl/training/logprobs.py). With aligned rows one write index per decode step serves the whole batch, and the
decode step has the same shapes whatever the prompt lengths are (no recompiles).

Exactness: embeddings, RMSNorms, q/k/v/o projections (with their biases: Qwen2), qk-norm (Qwen3), RoPE, the
SwiGLU MLP and the LM head are Levanter's own modules, called as they are, except that every plain Linear contracts
with its weight as the dot's first operand (`WeightFirstLinear`: the same sum). Only the attention kernel is new:
a masked softmax over the dense cache (the same math as Levanter's VANILLA backend: q * scale, dot, optional
soft-cap, mask, softmax in the model dtype) instead of Levanter's paged attention.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import haliax as hax
import jax
import jax.numpy as jnp
from haliax.nn.scan import BlockSeq, Stacked
from levanter.layers.attention import Attention
from levanter.models.llama import LlamaDecoderLayer
from levanter.models.qwen import QwenDecoderLayer

BATCH, POS = "batch", "position"
SUPPORTED_LAYERS = (LlamaDecoderLayer, QwenDecoderLayer)


class KvCache(eqx.Module):
    # one array per layer (a tuple, not a stacked array, so XLA updates each in place without a restack copy)
    # head-major: attention is then a plain batched matmul over (batch, kv_head), about 5x faster on the CPU than
    # a slot-major layout (measured: 0.4 vs 2.1 ms per layer at batch 32, 128 slots). Keys are stored transposed,
    # [head_size, slot], so q k^T contracts the inner axis of q with the outer axis of k: XLA's CPU dot otherwise
    # transposes the whole cache for every query (measured at batch 32, 4 kv heads, 256 slots, head 64: 3.7 ms
    # vs 0.5 ms per layer and decode step).
    k: tuple[jax.Array, ...]  # per layer, post-RoPE keys [batch, kv_head, head_size, slot]
    v: tuple[jax.Array, ...]  # per layer [batch, kv_head, slot, head_size]

    @property
    def num_slots(self) -> int:
        return self.v[0].shape[2]


def decoder_layers(model) -> list:
    """The decoder layers of a Levanter Llama-family LM (Stacked or BlockSeq), unstacked, in order."""
    return list(model.transformer.layers.unstacked())


class WeightFirstLinear(hax.nn.Linear):
    """A Levanter Linear whose contraction takes the weight as the dot's first operand: out = W . x over `In`, the
    output's axes (Out..., then x's other axes). Same sum, same named result; Haliax orders axes by name, so the
    modules around it are unchanged.

    Why: with the weight stored (Out..., In...) and first, XLA's CPU dot runs each decode projection as
    W[N, K] x^T[K, rows], streaming every weight row along its contiguous In axis; as x[rows, K] W[K, N] the same
    dots took about 1.4x as long at rows = 32 (docs/benchmarks.md "Stop 37").
    """

    def __call__(self, inputs, *, key=None):
        del key
        out = hax.dot(self.weight * self.reparam.active_scale, inputs, axis=self.In, dot_general=self.dot_general)
        return out + self.bias if self.bias is not None else out


def _weight_first(linear: hax.nn.Linear) -> WeightFirstLinear:
    """`linear` as a WeightFirstLinear with its weight's axes ordered (Out..., In...) (Levanter's own order for
    models built or loaded from HF, where this moves nothing)."""
    weight = linear.weight.rearrange(hax.concat_axis_specs(linear.Out, linear.In))
    fields = {f.name: getattr(linear, f.name) for f in dataclasses.fields(linear)}
    return WeightFirstLinear(**{**fields, "weight": weight})


def decode_layout(model):
    """`model` laid out for the decode loop: Stacked layers (the trainer's scan form) as a BlockSeq of the same
    layers, every plain Linear a WeightFirstLinear with its weight ordered (Out..., In...). Same function, same
    outputs.

    Why: inside the decode loop XLA's CPU backend re-sliced the stacked weights at every step, and with x first it
    transposed the attention projections' weights into the form its dot wants, at every step. Laid out once per
    set of weights here, the compiled decode loop copies no weight (only activations of [rows, features] size).
    """
    layers = model.transformer.layers
    if isinstance(layers, Stacked):
        model = eqx.tree_at(
            lambda m: m.transformer.layers, model,
            BlockSeq(list(layers.unstacked()), layers.Block, layers.gradient_checkpointing),
        )
    is_linear = lambda x: type(x) is hax.nn.Linear  # noqa: E731  (a subclass keeps its own __call__)
    return jax.tree.map(lambda x: _weight_first(x) if is_linear(x) else x, model, is_leaf=is_linear)


def check_supported(model) -> None:
    """Raise if `model` is not a Levanter LM whose layers this decoder reproduces exactly."""
    layers = getattr(getattr(model, "transformer", None), "layers", None)
    if layers is None or not hasattr(layers, "unstacked"):
        raise NotImplementedError(
            f"sampler: {type(model).__name__} has no transformer.layers; supported: Levanter Llama-family models "
            f"(layers {[c.__name__ for c in SUPPORTED_LAYERS]})"
        )
    layer = layers.unstacked()[0]
    if not isinstance(layer, SUPPORTED_LAYERS) or not isinstance(layer.self_attn, Attention):
        raise NotImplementedError(
            f"sampler: decoder layer {type(layer).__name__} is not supported; "
            f"allowed: {[c.__name__ for c in SUPPORTED_LAYERS]}"
        )
    cfg = model.config
    if getattr(cfg, "use_sliding_window", False):
        raise NotImplementedError(
            f"sampler: sliding-window attention ({type(cfg).__name__}.use_sliding_window=True) is not implemented"
        )


def init_cache(model, batch: int, num_slots: int, dtype=jnp.float32, sharding=None) -> KvCache:
    """Zero cache for `batch` rows of `num_slots` tokens, created directly on its shards when `sharding` is given."""
    attn_cfg = decoder_layers(model)[0].self_attn.config
    heads, head_size = attn_cfg.KVHeads.size, attn_cfg.HeadSize.size
    n = model.config.num_layers

    def zeros(shape) -> tuple[jax.Array, ...]:
        return tuple(jnp.zeros(shape, dtype, device=sharding) for _ in range(n))

    return KvCache(zeros((batch, heads, head_size, num_slots)), zeros((batch, heads, num_slots, head_size)))


def grow_cache(cache: KvCache, num_slots: int) -> KvCache:
    """`cache` with zero slots appended up to `num_slots`; the slots already written keep their keys and values."""
    extra = num_slots - cache.num_slots
    k = tuple(jnp.pad(k, ((0, 0), (0, 0), (0, 0), (0, extra))) for k in cache.k)
    v = tuple(jnp.pad(v, ((0, 0), (0, 0), (0, extra), (0, 0))) for v in cache.v)
    return KvCache(k, v)


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, key_mask: jax.Array, attn: Attention) -> jax.Array:
    """softmax(q k * scale [soft-capped], masked) v for q[B,Hkv,G,T,D], k[B,Hkv,D,S], v[B,Hkv,S,D], key_mask[B,T,S].

    Same operation order as Levanter's simple_attention_with_dropout (scale q first, masked logits = -1e9).
    """
    cfg = attn.config
    B, H, G, T, D = q.shape
    scale = cfg.scaling_factor if cfg.scaling_factor is not None else 1.0 / math.sqrt(cfg.HeadSize.size)
    scores = jnp.einsum("bhqd,bhds->bhqs", (q * scale).reshape(B, H, G * T, D), k).reshape(B, H, G, T, -1)
    if cfg.logits_soft_cap is not None:
        scores = jnp.tanh(scores / cfg.logits_soft_cap) * cfg.logits_soft_cap
    scores = jnp.where(key_mask[:, None, None, :, :], scores, -1e9)
    weights = jax.nn.softmax(scores, axis=-1).astype(q.dtype).reshape(B, H, G * T, -1)
    return jnp.einsum("bhqs,bhsd->bhqd", weights, v).reshape(B, H, G, T, D)


def _layer_forward(layer, x, pos_ids, k_cache, v_cache, write_at, key_mask, attend_len):
    """One decoder layer over new tokens x[batch, position, embed]; writes their k/v at slot `write_at`.

    Mirrors LlamaDecoderLayer.decode (pre-norm, residuals, optional hybrid post-norms), with dense attention over
    the first `attend_len` cache slots.
    """
    residual = x
    h = layer.input_layernorm(x)
    attn: Attention = layer.self_attn
    q, k, v = attn._compute_qkv(h, key=None, pos_ids=pos_ids)
    q_axes = (BATCH, "kv_head", "q_heads_per_group", POS, "head_size")
    k_axes, v_axes = (BATCH, "kv_head", "head_size", POS), (BATCH, "kv_head", POS, "head_size")
    k_new, v_new = k.rearrange(k_axes).array.astype(k_cache.dtype), v.rearrange(v_axes).array.astype(v_cache.dtype)
    k_cache = jax.lax.dynamic_update_slice(k_cache, k_new, (0, 0, 0, write_at))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v_new, (0, 0, write_at, 0))
    q_arr = q.rearrange(q_axes).array
    out = _attend(
        q_arr,
        k_cache[:, :, :, :attend_len].astype(q_arr.dtype),
        v_cache[:, :, :attend_len].astype(q_arr.dtype),
        key_mask,
        attn,
    )
    out = hax.named(out, tuple(q.resolve_axis(a) for a in q_axes))
    out = out.flatten_axes(("kv_head", "q_heads_per_group"), "heads").astype(x.dtype)
    attn_out = attn.o_proj(out, key=None)
    if getattr(layer, "post_attn_layernorm", None) is not None:
        attn_out = layer.post_attn_layernorm(attn_out)
    x = residual + attn_out

    residual = x
    mlp_out = layer.mlp(layer.post_attention_layernorm(x), key=None)
    if getattr(layer, "post_mlp_layernorm", None) is not None:
        mlp_out = layer.post_mlp_layernorm(mlp_out)
    return residual + mlp_out, k_cache, v_cache


def _forward(model, tokens, positions, cache: KvCache, write_at, key_mask, attend_len: int, *, logits: bool):
    """Run tokens[B,T] (RoPE positions[B,T]) through the model, writing their k/v at slots write_at..write_at+T-1.

    Returns (f32 logits[B,T,V] or None, new cache).
    """
    ids = hax.named(tokens.astype(jnp.int32), (BATCH, POS))
    pos_ids = hax.named(positions.astype(jnp.int32), (BATCH, POS))
    x = model.embeddings.embed(ids)
    new_k, new_v = [], []
    for i, layer in enumerate(decoder_layers(model)):
        x, k_i, v_i = _layer_forward(
            layer, x, pos_ids, cache.k[i], cache.v[i], write_at, key_mask, attend_len
        )
        new_k.append(k_i)
        new_v.append(v_i)
    cache = KvCache(tuple(new_k), tuple(new_v))
    if not logits:
        return None, cache
    x = model.transformer.norm(x)
    out = model.lm_head(x, key=None) if model.lm_head is not None else model.embeddings.unembed(x)
    return out.rearrange((BATCH, POS, model.Vocab.name)).array.astype(jnp.float32), cache


def fill_cache(model, tokens: jax.Array, pad: jax.Array, cache: KvCache, length: int) -> KvCache:
    """(Re)compute the k/v of slots [0, length) from tokens[B, >=length] (left padding pad[B]) under `model`.

    Used for the prefill and, after a weight swap, to rebuild the cache of the sequences in flight.
    Pad slots attend only to themselves (their outputs are never read) so no row of the softmax is empty.
    """
    slots = jnp.arange(length)
    positions = jnp.maximum(slots[None, :] - pad[:, None], 0)
    causal = slots[None, None, :] <= slots[None, :, None]  # [1, q, k]
    real_key = slots[None, None, :] >= pad[:, None, None]  # [B, 1, k]
    key_mask = (causal & real_key) | (slots[None, None, :] == slots[None, :, None])
    _, cache = _forward(model, tokens[:, :length], positions, cache, 0, key_mask, length, logits=False)
    return cache


def decode_step(model, tokens_in: jax.Array, cur: jax.Array, pad: jax.Array, cache: KvCache):
    """Feed tokens_in[B] at slot `cur` (scalar) and return (f32 next-token logits[B, V], new cache)."""
    slots = jnp.arange(cache.num_slots)
    positions = (cur - pad)[:, None]
    key_mask = ((slots[None, :] <= cur) & (slots[None, :] >= pad[:, None]))[:, None, :]  # [B, 1, S]
    logits, cache = _forward(
        model, tokens_in[:, None], positions, cache, cur, key_mask, cache.num_slots, logits=True
    )
    return logits[:, 0], cache
