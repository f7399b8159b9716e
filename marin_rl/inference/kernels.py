"""The jitted programs of the sampler: prefill/refill of the KV cache, a prefill of a wave's distinct prompts copied
to their rows, a chunk of decode steps, and cache growth.

They take the model as an argument (never a closure), so new weights of the same shapes reuse the compiled
programs. Compiled shapes: the batch bucket (and, for a shared prefill, the bucket of its distinct prompts), the KV
cache's slot bucket (it grows in steps as sequences lengthen, up to max_seq_len), the fill length bucket, and the
chunk length; prompt lengths, temperature, greedy, top-k/top-p and max_new_tokens are traced values.

One set per mesh (`kernels_for`): the programs are traced under the sampler's mesh and axis mapping
(inference/mesh_placement.py), and the decode state and KV cache they return are pinned to `state_sharding`, so
the next call finds its input where it left it (no reshard, no recompile).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from marin_rl.inference.decoder import KvCache, decode_step, fill_cache, grow_cache
from marin_rl.inference.mesh_placement import cache_sharding, replicated, rows_sharding
from marin_rl.inference.token_choice import choose_tokens


class DecodeState(NamedTuple):
    tokens: jax.Array  # i32[B, S]: left-padded prompts, then generated tokens (slot cur+1 is written next)
    pad: jax.Array  # i32[B]: left padding of each row (its first real slot)
    cur: jax.Array  # i32[]: slot of the token fed at the next step (its k/v are not in the cache yet)
    gen_start: jax.Array  # i32[]: slot of the first generated token (= padded prompt length)
    done: jax.Array  # bool[B]
    cache: KvCache


class DecodeParams(NamedTuple):
    temperature: jax.Array  # f32[]
    greedy: jax.Array  # bool[]
    top_k: jax.Array  # i32[] (0 = off)
    top_p: jax.Array  # f32[] (1 = off)
    eos_ids: jax.Array  # i32[E], padded with -1
    max_new_tokens: jax.Array  # i32[]
    pad_id: jax.Array  # i32[]: written in place of tokens of finished rows


class StepOutput(NamedTuple):
    tokens: jax.Array  # i32[B]
    logprobs: jax.Array  # f32[B]
    sampling_logprobs: jax.Array  # f32[B]
    active: jax.Array  # bool[B]: the row was still generating, so this token is part of its response
    hit_eos: jax.Array  # bool[B]


class Kernels(NamedTuple):
    fill: Callable  # (model, tokens, pad, cache, *, length) -> cache
    fill_shared: Callable  # (model, tokens_U, pad_U, cache_U, prompt_of_B, *, length) -> cache of B rows
    decode_chunk: Callable  # (model, state, wave key, params, *, num_steps) -> (state, StepOutput)
    grow: Callable  # (cache, *, num_slots) -> cache with zero slots appended


def state_sharding(mesh: Mesh) -> DecodeState:
    """Where a DecodeState lives on the sampler's mesh: per-row arrays split by rows, the KV cache by rows and
    kv heads, the slot counters replicated."""
    return DecodeState(
        tokens=rows_sharding(mesh, 2), pad=rows_sharding(mesh, 1), cur=replicated(mesh),
        gen_start=replicated(mesh), done=rows_sharding(mesh, 1), cache=cache_sharding(mesh),
    )


@functools.cache
def kernels_for(mesh: Mesh) -> Kernels:
    """The jitted fill, decode_chunk and grow of one mesh; the decode state and KV cache they return are placed where
    `state_sharding` puts them (jit's out_shardings: in the very form the inputs were placed in, since an
    equivalent but differently written sharding, e.g. P() for P('data') of size 1, would be a new cache entry).

    Fresh functions per mesh: jax caches traces by function, and a trace made under one mesh's axis mapping
    must not be reused under another's.
    """
    where = state_sharding(mesh)
    step_rows = NamedSharding(mesh, PartitionSpec(None, *where.done.spec))  # StepOutput: [num_steps, B]

    def fill(model, tokens: jax.Array, pad: jax.Array, cache: KvCache, *, length: int) -> KvCache:
        """KV cache of slots [0, length) computed from `tokens` under `model` (prefill, or refill after a swap)."""
        return fill_cache(model, tokens, pad, cache, length)

    def fill_shared(model, tokens_U, pad_U, cache_U: KvCache, prompt_of_B: jax.Array, *, length: int) -> KvCache:
        """`fill` of U distinct prompts, then row b of the wave takes the cache of prompt prompt_of_B[b]."""
        return take_rows(fill_cache(model, tokens_U, pad_U, cache_U, length), prompt_of_B)

    def decode(model, state: DecodeState, key: jax.Array, params: DecodeParams, *, num_steps: int):
        return decode_chunk(model, state, key, params, num_steps)

    def grow(cache: KvCache, *, num_slots: int) -> KvCache:
        return grow_cache(cache, num_slots)

    return Kernels(
        jax.jit(fill, static_argnames=("length",), donate_argnames=("cache",), out_shardings=where.cache),
        # no donation: the U-row cache cannot hold the B-row output
        jax.jit(fill_shared, static_argnames=("length",), out_shardings=where.cache),
        jax.jit(decode, static_argnames=("num_steps",), donate_argnames=("state",),
                out_shardings=(where, step_rows)),
        jax.jit(grow, static_argnames=("num_slots",), out_shardings=where.cache),
    )


def take_rows(cache: KvCache, rows_B: jax.Array) -> KvCache:
    """The cache of rows rows_B[0], rows_B[1], ... (a row may be taken more than once)."""
    return KvCache(
        tuple(jnp.take(k, rows_B, axis=0) for k in cache.k), tuple(jnp.take(v, rows_B, axis=0) for v in cache.v)
    )


def decode_chunk(
    model, state: DecodeState, key: jax.Array, params: DecodeParams, num_steps: int
) -> tuple[DecodeState, StepOutput]:
    """Up to `num_steps` decode steps under one set of weights; outputs are [num_steps, B] (inactive = padding).

    A while_loop rather than a scan: it stops as soon as every row has finished, and unlike a lax.cond around
    each step it never copies the KV cache (a cond-in-scan version ran 3x slower on the CPU).
    `key` is the wave's key; each step draws with fold_in(key, slot it feeds), so the tokens do not depend on how
    the steps are cut into chunks (sampler.decode_chunk changes speed and swap points, not the samples).
    """
    B = state.done.shape[0]
    out0 = StepOutput(
        tokens=jnp.full((num_steps, B), params.pad_id, jnp.int32),
        logprobs=jnp.zeros((num_steps, B), jnp.float32),
        sampling_logprobs=jnp.zeros((num_steps, B), jnp.float32),
        active=jnp.zeros((num_steps, B), bool),
        hit_eos=jnp.zeros((num_steps, B), bool),
    )

    def keep_going(carry) -> jax.Array:
        i, st, _ = carry
        return (i < num_steps) & ~jnp.all(st.done)

    def step(carry):
        i, st, out = carry
        tok_in = jax.lax.dynamic_slice_in_dim(st.tokens, st.cur, 1, axis=1)[:, 0]
        logits, cache = decode_step(model, tok_in, st.cur, st.pad, st.cache)
        step_key = jax.random.fold_in(key, st.cur)
        choice = choose_tokens(logits, step_key, params.temperature, params.greedy, params.top_k, params.top_p)
        active = ~st.done
        tok = jnp.where(active, choice.tokens, params.pad_id)
        tokens = jax.lax.dynamic_update_slice(st.tokens, tok[:, None], (0, st.cur + 1))
        num_generated = st.cur + 2 - st.gen_start
        hit_eos = active & jnp.isin(tok, params.eos_ids)
        done = st.done | hit_eos | (active & (num_generated >= params.max_new_tokens))
        row = StepOutput(tok, choice.logprobs, choice.sampling_logprobs, active, hit_eos)
        out = jax.tree.map(lambda buf, x: buf.at[i].set(x), out, row)
        return i + 1, st._replace(tokens=tokens, cur=st.cur + 1, done=done, cache=cache), out

    _, state, out = jax.lax.while_loop(keep_going, step, (jnp.asarray(0, jnp.int32), state, out0))
    return state, out
