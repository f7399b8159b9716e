"""Device meshes from `hardware.trainer_mesh` and the Haliax axis mappings that shard the trainer over them.

Mesh axes (physical, in this order so `model` is the fastest-varying, i.e. the most local, devices):
    data   pure data parallelism: parameters replicated, the batch split
    fsdp   fully-sharded data parallelism: parameters and optimizer state split along "embed", the batch split
    model  tensor parallelism: attention heads, MLP width and the vocabulary split

Levanter's Llama/Qwen name their array axes ("embed", "mlp", "heads", "kv_head", "vocab", "layer", "batch",
"position"); the two mappings below send those logical axes to the mesh axes, exactly as Levanter's own
`TrainerConfig.parameter_axis_mapping` / `compute_axis_mapping` do (its "data" axis is our "fsdp", its "replica"
our "data"). Haliax's `hax.shard` / `sharding_for_axis` turn them into `NamedSharding`s; nothing is hand-placed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import haliax as hax
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

logger = logging.getLogger(__name__)

MESH_AXES = ("data", "fsdp", "model")
BATCH_AXIS = "batch"
# tensor-parallel logical axes: attention heads (q heads and kv heads), MLP width
TENSOR_PARALLEL_AXES = ("heads", "kv_head", "mlp")
FSDP_AXIS = "embed"
# the vocabulary: stored split over `model` (embedding and LM head are the largest matrices of a small model),
# gathered for compute like an FSDP axis (a vocab-split embedding lookup makes XLA replicate the table anyway)
STORED_SPLIT_AXES = {"vocab": "model"}

COMPUTE_MAPPING: dict[str, Any] = {
    BATCH_AXIS: ("data", "fsdp"),
    **{axis: "model" for axis in TENSOR_PARALLEL_AXES},
}
PARAMETER_MAPPING: dict[str, Any] = {**COMPUTE_MAPPING, **STORED_SPLIT_AXES, FSDP_AXIS: "fsdp"}


def resolve_mesh_shape(mesh_cfg: Mapping[str, int], n_devices: int, key: str = "hardware.trainer_mesh") -> dict[str, int]:
    """{axis: size} with the one -1 axis set to n_devices / prod(other sizes); the product may be < n_devices
    (the mesh then takes the first devices) but never more."""
    sizes = {axis: int(mesh_cfg.get(axis, 1)) for axis in MESH_AXES}
    fixed = math.prod(size for size in sizes.values() if size != -1)
    rest = [axis for axis, size in sizes.items() if size == -1]
    if rest:
        if n_devices % fixed:
            raise ValueError(
                f"{key}={dict(mesh_cfg)}: {n_devices} device(s) are not divisible by the fixed axes' product "
                f"{fixed}, so {rest[0]}=-1 has no whole size; set every axis explicitly"
            )
        sizes[rest[0]] = n_devices // fixed
    total = math.prod(sizes.values())
    if total > n_devices:
        raise ValueError(
            f"{key}={dict(mesh_cfg)} needs {total} devices but the actor has {n_devices}; shrink the mesh or give "
            "the actor more devices (hardware.trainer_resources)"
        )
    return sizes


def build_mesh(mesh_cfg: Mapping[str, int], devices: list | None = None, key: str = "hardware.trainer_mesh") -> Mesh:
    """A (data, fsdp, model) jax Mesh over the first prod(sizes) devices, laid out by jax's topology-aware
    `mesh_utils.create_device_mesh` (ICI-local devices on the fastest axis)."""
    devices = list(jax.devices() if devices is None else devices)
    sizes = resolve_mesh_shape(mesh_cfg, len(devices), key)
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    used = devices[: math.prod(shape)]
    if len(used) < len(devices):
        logger.info("%s=%s uses %d of %d visible devices", key, sizes, len(used), len(devices))
    try:
        grid = mesh_utils.create_device_mesh(shape, devices=used, allow_split_physical_axes=True)
    except (AssertionError, ValueError, NotImplementedError):  # a subset that is no physical sub-torus
        grid = np.array(used).reshape(shape)
    return Mesh(grid, MESH_AXES)


def mesh_sizes(mesh: Mesh) -> dict[str, int]:
    """{axis name: size} of a mesh."""
    return dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))


def batch_split(mesh: Mesh) -> int:
    """Ways the batch is split: data x fsdp (each micro-batch must divide by it)."""
    sizes = mesh_sizes(mesh)
    return sizes["data"] * sizes["fsdp"]


@contextmanager
def compute_scope(mesh: Mesh) -> Iterator[None]:
    """Mesh + compute axis mapping in context: what jitted code needs while it is traced and called, so that
    Levanter's internal `hax.shard` calls and ours resolve to this mesh."""
    with hax.partitioning.set_mesh(mesh), hax.axis_mapping(COMPUTE_MAPPING):
        yield


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array (scalars, PRNG keys, optimizer counters)."""
    return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, ndim: int, leading: int = 0) -> NamedSharding:
    """Rows of a [.., B, ...] array split over the batch axes of COMPUTE_MAPPING (`leading` unsplit axes first)."""
    spec = hax.partitioning.pspec_for_axis((BATCH_AXIS,), COMPUTE_MAPPING)
    return NamedSharding(mesh, PartitionSpec(*([None] * leading), *spec, *([None] * (ndim - leading - 1))))


def shard_params(tree: Any, mesh: Mesh) -> Any:
    """Place a pytree of parameters/optimizer state: NamedArrays by PARAMETER_MAPPING (hax.shard), every other
    array replicated. Inside jit this is a sharding constraint instead of a transfer."""
    tree = hax.shard(tree, PARAMETER_MAPPING, mesh)
    if hax.partitioning.is_in_jit():
        return tree
    is_named = lambda x: isinstance(x, hax.NamedArray)  # noqa: E731

    def place_plain(x):
        if isinstance(x, jax.Array) and not is_named(x):
            return jax.device_put(x, replicated(mesh))
        return x

    return jax.tree.map(place_plain, tree, is_leaf=is_named)


def device_bytes(tree: Any, device: Any) -> int:
    """Bytes of the shards of `tree`'s arrays that live on `device` (what that device holds of the tree)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            total += sum(s.data.nbytes for s in leaf.addressable_shards if s.device == device)
    return total
