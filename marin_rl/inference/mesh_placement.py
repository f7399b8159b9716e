"""Where the sampler's arrays live on a rollout worker's mesh (`hardware.rollout_mesh`).

The same (data, fsdp, model) mesh and Haliax axis mappings as the trainer (training/mesh.py): weights are placed
by PARAMETER_MAPPING (attention heads and MLP width split over `model` = tensor parallelism, the vocabulary split
over `model`, "embed" over `fsdp`), decoding runs under COMPUTE_MAPPING (batch rows over data x fsdp). The KV
cache `[batch, kv_head, slot, head_size]` is split the same way: rows over data x fsdp, kv heads over model.
Weights that arrive from the trainer as host arrays go straight to their shards (runtime/weight_sync.py
WeightPlacement: one batched `jax.device_put` to their NamedShardings), never first whole onto one device.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import haliax as hax
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from marin_rl.training.mesh import BATCH_AXIS, COMPUTE_MAPPING, PARAMETER_MAPPING, build_mesh, mesh_sizes

MESH_KEY = "hardware.rollout_mesh"


def rollout_mesh(hardware_cfg: Any, devices: list | None = None) -> Mesh:
    """The sampler's mesh: hardware.rollout_mesh over `devices` (default: every device this process sees)."""
    return build_mesh(hardware_cfg.rollout_mesh.model_dump(), devices, key=MESH_KEY)


def single_device_mesh() -> Mesh:
    """A 1x1x1 mesh on the first device: the sampler's placement when no mesh is given."""
    return build_mesh({"data": 1, "fsdp": 1, "model": 1}, jax.devices()[:1], key=MESH_KEY)


def check_model_splits(model: Any, mesh: Mesh) -> None:
    """Raise if a named axis of the weights does not divide by the mesh axes it is split over (Haliax could not
    place it); the message names hardware.rollout_mesh."""
    sizes = mesh_sizes(mesh)
    for leaf in jax.tree.leaves(model, is_leaf=lambda x: isinstance(x, hax.NamedArray)):
        if not isinstance(leaf, hax.NamedArray):
            continue
        for axis in leaf.axes:
            target = PARAMETER_MAPPING.get(axis.name)
            if target is None:
                continue
            ways = math.prod(sizes[t] for t in ((target,) if isinstance(target, str) else target))
            if axis.size % ways:
                raise ValueError(
                    f"model axis {axis.name!r} of size {axis.size} does not split over {MESH_KEY} {sizes} "
                    f"({target}={ways}); choose mesh sizes that divide it"
                )


def weight_shardings(template: Any, mesh: Mesh) -> Any:
    """NamedSharding of every weight of `template` (concrete or abstract) by PARAMETER_MAPPING; plain arrays
    replicated."""
    return hax.partitioning.infer_resource_partitions(template, PARAMETER_MAPPING, preserve_existing_shardings=False,
                                                      mesh=mesh)


def cache_sharding(mesh: Mesh) -> NamedSharding:
    """KV cache k [batch, kv_head, head_size, slot] and v [batch, kv_head, slot, head_size]: rows over the batch
    axes, kv heads over `model`."""
    (rows,) = hax.partitioning.pspec_for_axis((BATCH_AXIS,), COMPUTE_MAPPING)
    return NamedSharding(mesh, PartitionSpec(rows, COMPUTE_MAPPING["kv_head"], None, None))


def rows_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """A [B, ...] per-row array (tokens, padding, done flags): rows over the batch axes."""
    (rows,) = hax.partitioning.pspec_for_axis((BATCH_AXIS,), COMPUTE_MAPPING)
    return NamedSharding(mesh, PartitionSpec(rows, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def row_split(mesh: Mesh) -> int:
    """Ways the batch rows are split (data x fsdp): every batch bucket is a multiple of it."""
    sizes = mesh_sizes(mesh)
    return sizes["data"] * sizes["fsdp"]


def weight_devices(model: Any) -> int:
    """Devices the model's weights span (the union over leaves)."""
    return len({d for x in jax.tree.leaves(eqx.filter(model, eqx.is_array)) for d in x.sharding.device_set})
