"""Multi-device trainer checks, run in a subprocess with 8 simulated CPU devices (see tests/test_mesh.py).

Usage: XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/mesh_script.py equal_loss,bytes,reshard,shared_prompts DIR
Prints one JSON line of results; the pytest side asserts on it.
"""

from __future__ import annotations

import functools
import json
import sys

import jax
import numpy as np
from tiny_policy import (
    BATCH,
    MODEL,
    OPTIMIZER,
    TEMPERATURE,
    arithmetic_batch,
    shared_prompt_batches,
    tiny_model,
)

from marin_rl.config.spec import HardwareConfig, MeshConfig, TrainConfig
from marin_rl.models.hf_io import export_hf, import_hf
from marin_rl.objectives import LossConfig
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.mesh import device_bytes, mesh_sizes
from marin_rl.training.trainer import Trainer


def trainer_on(mesh: dict, micro_batch_size: int | None = None, unroll: bool = False) -> Trainer:
    """The tiny trainer of tiny_policy.py on hardware.trainer_mesh=mesh (the first prod(sizes) devices); one per
    (mesh, micro-batch, unrolled layers) so the checks share compiled steps."""
    return _trainer(tuple(sorted(mesh.items())), micro_batch_size, unroll)


@functools.cache
def _trainer(mesh: tuple, micro_batch_size: int | None, unroll: bool) -> Trainer:
    hardware = HardwareConfig(
        name="cpu", accelerator="cpu", trainer_mesh=MeshConfig(**dict(mesh)), trainer_unroll_layers=unroll
    )
    train = TrainConfig(batch_size=BATCH, micro_batch_size=micro_batch_size, steps=10)
    return Trainer(MODEL, OPTIMIZER, LossConfig(name="test"), train, hardware, TEMPERATURE)


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def max_abs_diff(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) if x.size else 0.0 for x, y in zip(leaves(a), leaves(b), strict=True))


def equal_loss(_dir: str) -> dict:
    """Two steps with gradient accumulation (2 micro-batches of 4) on one device and on a 2x2x2 mesh."""
    model, tokenizer, _ = tiny_model()
    results = {}
    states = {}
    for name, mesh in {"single": {"data": 1, "fsdp": 1, "model": 1}, "mesh": {"data": 2, "fsdp": 2, "model": 2}}.items():
        trainer = trainer_on(mesh, micro_batch_size=4)
        state = trainer.init_state(model, jax.random.PRNGKey(3))
        losses = []
        for seed in (1, 2):
            state, metrics = trainer.train_step(state, arithmetic_batch(tokenizer, seed))
            losses.append(metrics["loss/total"])
        states[name] = state
        results[name] = {"losses": losses, "mesh": mesh_sizes(trainer.mesh),
                         "devices": len(state.model.embeddings.token_embeddings.weight.array.devices())}
    results["param_max_abs_diff"] = max_abs_diff(states["single"].model, states["mesh"].model)
    results["opt_max_abs_diff"] = max_abs_diff(states["single"].opt_state, states["mesh"].opt_state)
    return results


def shared_prompts(_dir: str) -> dict:
    """One step on shared-prompt batches (3 prompts: the 2x2 batch split pads them to 4) on one device and on a
    2x2x2 mesh, against one row per response on one device."""
    model, _, _ = tiny_model()
    _, plain, shared, _ = shared_prompt_batches(seed=4, groups=3, per_group=2)
    steps = {}
    for name, mesh, batch in (
        ("plain", {"data": 1, "fsdp": 1, "model": 1}, plain),
        ("single", {"data": 1, "fsdp": 1, "model": 1}, shared),
        ("mesh", {"data": 2, "fsdp": 2, "model": 2}, shared),
    ):
        trainer = trainer_on(mesh, unroll=True)
        steps[name] = trainer.train_step(trainer.init_state(model, jax.random.PRNGKey(3)), batch)
    return {
        "losses": {name: metrics["loss/total"] for name, (_, metrics) in steps.items()},
        "param_max_abs_diff_single": max_abs_diff(steps["plain"][0].model, steps["single"][0].model),
        "param_max_abs_diff_mesh": max_abs_diff(steps["plain"][0].model, steps["mesh"][0].model),
    }


def is_norm_path(path) -> bool:
    return any("norm" in str(getattr(k, "name", getattr(k, "key", ""))) for k in path)


def bytes_figures(_dir: str) -> dict:
    """Per-device parameter bytes of the tiny model on fsdp=2 x model=2, against the total and the norms."""
    model, _, _ = tiny_model()
    trainer = trainer_on({"data": 1, "fsdp": 2, "model": 2})
    state = trainer.init_state(model)
    params = state.model
    total = sum(x.nbytes for x in jax.tree.leaves(params))
    flat = jax.tree_util.tree_leaves_with_path(params)
    norm_bytes = sum(x.nbytes for path, x in flat if is_norm_path(path))
    per_device = [device_bytes(params, d) for d in trainer.mesh.devices.flat]
    opt_total = sum(x.nbytes for x in jax.tree.leaves(state.opt_state))
    opt_per_device = [device_bytes(state.opt_state, d) for d in trainer.mesh.devices.flat]
    return {"total": total, "norm_bytes": norm_bytes, "per_device": per_device,
            "opt_total": opt_total, "opt_per_device": opt_per_device, "mesh": mesh_sizes(trainer.mesh)}


def reshard(tmp: str) -> dict:
    """Train one step on 8 devices, save; restore on 2 devices, save again; restore on 1 device; compare."""
    model, tokenizer, _ = tiny_model()
    t8 = trainer_on({"data": 2, "fsdp": 2, "model": 2}, micro_batch_size=4)
    s8, _ = t8.train_step(t8.init_state(model, jax.random.PRNGKey(5)), arithmetic_batch(tokenizer, 1))
    p8 = ckpt.save_checkpoint(ckpt.checkpoint_path(f"{tmp}/a", 1), s8, {"from": 8}, model_config=MODEL)

    t2 = trainer_on({"data": 1, "fsdp": 2, "model": 1})
    s2, extra2 = ckpt.restore_checkpoint(p8, t2.init_state(model), mesh=t2.mesh)
    p2 = ckpt.save_checkpoint(ckpt.checkpoint_path(f"{tmp}/b", 1), s2, {"from": 2}, model_config=MODEL)

    t1 = trainer_on({"data": 1, "fsdp": 1, "model": 1}, micro_batch_size=4)
    s1, _ = ckpt.restore_checkpoint(p2, t1.init_state(model), mesh=t1.mesh)
    # the restored 1-device state trains on exactly as the 8-device one would
    s8_next, m8 = t8.train_step(s8, arithmetic_batch(tokenizer, 2))
    s1_next, m1 = t1.train_step(s1, arithmetic_batch(tokenizer, 2))

    # HF export straight from the 8-device sharded policy, read back on one device
    hf_dir = export_hf(s8.model, tokenizer, f"{tmp}/hf")
    hf_equal = all(
        np.array_equal(a, b) for a, b in zip(leaves(import_hf(hf_dir)), leaves(s8.model), strict=True)
    )

    def device_counts(state):
        return sorted({len(x.devices()) for x in jax.tree.leaves(state.model)})

    return {
        "extra2": extra2,
        "devices": {"8": device_counts(s8), "2": device_counts(s2), "1": device_counts(s1)},
        "equal_8_2": all(np.array_equal(a, b) for a, b in zip(leaves(s8), leaves(s2), strict=True)),
        "equal_8_1": all(np.array_equal(a, b) for a, b in zip(leaves(s8), leaves(s1), strict=True)),
        "step": int(s1.step),
        "hf_export_equal": hf_equal,
        "embed_sharding_2": str(s2.model.embeddings.token_embeddings.weight.array.sharding.spec),
        "next_loss": [m8["loss/total"], m1["loss/total"]],
        "next_param_max_abs_diff": max_abs_diff(s8_next.model, s1_next.model),
    }


if __name__ == "__main__":
    assert len(jax.devices()) == 8, jax.devices()
    modes, folder = sys.argv[1].split(","), sys.argv[2]
    fns = {"equal_loss": equal_loss, "bytes": bytes_figures, "reshard": reshard, "shared_prompts": shared_prompts}
    print("RESULT " + json.dumps({mode: fns[mode](f"{folder}/{mode}") for mode in modes}))
