"""The sampler on a 4-device rollout mesh, run in a subprocess with 4 simulated CPU devices (see
tests/test_sampler_mesh.py). Prints one JSON line of results; the pytest side asserts on it.

Usage: XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/sampler_mesh_script.py
"""

from __future__ import annotations

import json

import jax
import numpy as np

from marin_rl.config.spec import HardwareConfig, MeshConfig, ModelConfig, SamplerConfig
from marin_rl.inference import kernels
from marin_rl.inference.decoder import init_cache
from marin_rl.inference.mesh_placement import rollout_mesh, weight_devices
from marin_rl.inference.sampler import Sampler
from marin_rl.models.policy import build_policy, policy_structure
from marin_rl.runtime.weight_sync import arrays_into_model, model_to_arrays
from marin_rl.training.logprobs import response_logprobs
from marin_rl.training.mesh import compute_scope

MAX_SEQ_LEN, TEACHER_LEN, CHUNK, MAX_NEW = 64, 48, 8, 20
MESH = {"data": 2, "fsdp": 1, "model": 2}


def tiny_cfg(num_kv_heads: int = 4) -> ModelConfig:
    return ModelConfig(name="tiny", kind="tiny", max_seq_len=MAX_SEQ_LEN, num_heads=4, num_kv_heads=num_kv_heads)


def tiny(seed: int, num_kv_heads: int = 4):
    return build_policy(tiny_cfg(num_kv_heads), jax.random.PRNGKey(seed))[:2]


def teacher(model, rows, temperature: float) -> list[np.ndarray]:
    """The trainer's teacher-forced log-probs (marin_rl.training.logprobs) on ONE device: `model` as built."""
    arr = np.zeros((len(rows), TEACHER_LEN), np.int32)
    for i, (p, c) in enumerate(rows):
        arr[i, : len(p) + len(c.tokens)] = p + c.tokens
    ref = np.asarray(jax.jit(response_logprobs, static_argnums=(2,))(model, arr, temperature))
    return [ref[i, len(p) : len(p) + len(c.tokens)] for i, (p, c) in enumerate(rows)]


def placement_of(x) -> dict:
    """{named axis: mesh axis it is split over} of a NamedArray, mesh axes of size 1 left out (they split nothing);
    axis order aside, since the sampler reorders weights for its decode loop."""
    sizes = x.array.sharding.mesh.shape
    return {a.name: p for a, p in zip(x.axes, x.array.sharding.spec, strict=False) if p is not None and sizes[p] > 1}


def run() -> dict:
    model_a, tok = tiny(0)
    model_b, _ = tiny(1)
    assert len(model_a.embeddings.token_embeddings.weight.array.devices()) == 1  # the teacher's model: one device
    hardware = HardwareConfig(name="cpu", accelerator="cpu", rollout_mesh=MeshConfig(**MESH))
    mesh = rollout_mesh(hardware)
    cfg = SamplerConfig(name="levanter", temperature=1.0, max_new_tokens=MAX_NEW, decode_chunk=CHUNK)
    sampler = Sampler(model_a, tok, cfg, MAX_SEQ_LEN, version=0, seed=2, mesh=mesh)
    # the new weights arrive the way a rollout worker gets them: host arrays, placed shard by shard on its mesh
    template, _ = policy_structure(tiny_cfg())
    arrived = arrays_into_model(template, model_to_arrays(model_b), mesh=mesh)

    def on_chunk(chunks_done: int) -> None:
        if chunks_done == 1:
            sampler.set_weights(arrived, 1)

    prompts = [tok(t)["input_ids"] for t in ("2+2=", "Hello", "x")]
    results = sampler.generate(prompts, 2, on_chunk=on_chunk)
    rows = [(prompts[c.prompt_index], c) for comps in results for c in comps]
    ref_a, ref_b = teacher(model_a, rows, 1.0), teacher(model_b, rows, 1.0)
    before, after, after_vs_old = [], [], []
    for (_, c), a, b in zip(rows, ref_a, ref_b, strict=True):
        lp, v = np.asarray(c.logprobs), np.asarray(c.versions)
        before.append(float(np.max(np.abs(lp - a)[v == 0])))
        if (v == 1).any():
            after.append(float(np.max(np.abs(lp - b)[v == 1])))
            after_vs_old.append(float(np.max(np.abs(lp - a)[v == 1])))

    decode_compiles = sum("decode_chunk" in e for e in sampler.compile_events)  # before the new shapes below
    # 3 prompts x 8 answers (bucket 32, rows split over data): the prefill runs once per prompt, then each row
    # takes its prompt's cache across the devices; the sampler holds model_b since the swap
    shared = [(prompts[c.prompt_index], c) for comps in sampler.generate(prompts, 8) for c in comps]
    shared_gap = max(
        float(np.max(np.abs(np.asarray(c.logprobs) - ref)))
        for (_, c), ref in zip(shared, teacher(model_b, shared, 1.0), strict=True)
    )

    q_proj = sampler.model.transformer.layers.unstacked()[0].self_attn.q_proj.weight
    # the KV cache as the sampler's prefill leaves it: k [batch, kv_head, head_size, slot] split by rows and kv heads
    where = kernels.state_sharding(mesh)
    tokens, pad = jax.device_put((np.ones((8, MAX_SEQ_LEN), np.int32), np.zeros(8, np.int32)), (where.tokens, where.pad))
    with compute_scope(mesh):
        cache = kernels.kernels_for(mesh).fill(
            sampler.model, tokens, pad, init_cache(sampler.model, 8, MAX_SEQ_LEN, sharding=where.cache), length=16
        )
    try:
        Sampler(tiny(2, num_kv_heads=2)[0], tok, cfg, MAX_SEQ_LEN,
                mesh=rollout_mesh(HardwareConfig(name="cpu", accelerator="cpu",
                                                 rollout_mesh=MeshConfig(data=1, fsdp=1, model=4))))
        refused = ""
    except ValueError as err:
        refused = str(err)
    return {
        "devices": len(jax.devices()),
        "mesh": dict(zip(mesh.axis_names, mesh.devices.shape, strict=True)),
        "weight_devices": weight_devices(sampler.model),
        "arrived_devices": weight_devices(arrived),
        "q_proj_placement": placement_of(q_proj),
        "arrived_q_proj_placement": placement_of(arrived.transformer.layers.stacked.self_attn.q_proj.weight),
        "versions": [c.versions for _, c in rows],
        "max_gap_before_swap": max(before),
        "max_gap_after_swap": max(after) if after else None,
        "min_gap_after_swap_vs_old": min(after_vs_old) if after_vs_old else None,
        "cache_shape": list(cache.k[0].shape),
        "cache_shard_shapes": sorted({tuple(sh.data.shape) for sh in cache.k[0].addressable_shards}),
        "cache_devices": len(cache.k[0].sharding.device_set),
        "decode_compiles": decode_compiles,
        "shared_prefill": [e for e in sampler.compile_events if "from 8 rows" in e],
        "shared_rows": len(shared),
        "max_gap_shared_prefill": shared_gap,
        "refused_kv_split": refused,
    }


if __name__ == "__main__":
    assert len(jax.devices()) == 4, jax.devices()
    print("RESULT " + json.dumps(run()))
