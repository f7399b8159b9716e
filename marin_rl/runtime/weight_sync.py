"""Weight sync from the trainer to rollout workers: versioned, checksummed, all-or-nothing.

The trainer publishes a `WeightPacket` (version, checksum, and either a Ray object ref or a file path); a rollout
worker fetches it with a timeout, verifies the checksum and every leaf's shape and dtype against its own model,
and only then swaps the weights in. A partial, corrupt or mismatched set raises `WeightSyncError` and the worker
keeps sampling with the weights it had; a worker that has never received weights does not sample at all.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
import xxhash


class WeightSyncError(RuntimeError):
    pass


@dataclass(frozen=True)
class WeightPacket:
    version: int
    checksum: str
    nbytes: int
    refs: list | None = None  # [ObjectRef] (wrapped in a list so Ray does not resolve it in transit)
    path: str | None = None


def model_to_arrays(model: Any) -> list[np.ndarray]:
    """The model's array leaves, in tree order, as full host numpy arrays. A leaf sharded over devices of other
    JAX processes (a trainer mesh spanning hosts) is gathered with process_allgather, a collective: then every
    process of the trainer must call this, in the same order."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))
    return [host_array(x) for x in leaves]


def host_array(x: Any) -> np.ndarray:
    """The whole value of one array on this host: np.asarray where this process holds all of it (or a full
    replica), else gathered from every process (multihost_utils.process_allgather, tiled into the global shape)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def arrays_checksum(arrays: list[np.ndarray]) -> str:
    """xxh3-64 over every leaf's dtype, shape and bytes (fast enough for multi-GB models)."""
    h = xxhash.xxh3_64()
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def is_weight(x: Any) -> bool:
    """An array leaf of a model, concrete or abstract (a template from eqx.filter_eval_shape holds no data)."""
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def arrays_into_model(template: Any, arrays: list[np.ndarray], mesh: Any = None) -> Any:
    """A copy of `template` carrying `arrays`; every shape and dtype must match (else WeightSyncError).
    With a mesh, each host array goes straight to its shards there (inference/mesh_placement.py)."""
    params, static = eqx.partition(template, is_weight)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    if len(leaves) != len(arrays):
        raise WeightSyncError(f"weight set has {len(arrays)} arrays, the model has {len(leaves)}")
    for i, (old, new) in enumerate(zip(leaves, arrays)):
        if old.shape != new.shape or old.dtype != new.dtype:
            raise WeightSyncError(
                f"weight #{i}: got {new.dtype}{list(new.shape)}, the model has {old.dtype}{list(old.shape)}"
            )
    if mesh is not None:
        from marin_rl.inference.mesh_placement import place_weights

        return place_weights(template, arrays, mesh)
    new_params = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(a) for a in arrays])
    return eqx.combine(new_params, static)


class ObjectStoreChannel:
    """Weights travel through the Ray object store (shared memory on one node, object transfer across nodes)."""

    method = "object_store"

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        import ray

        ref = ray.put(arrays)
        return WeightPacket(version, arrays_checksum(arrays), sum(a.nbytes for a in arrays), refs=[ref])

    def fetch(self, packet: WeightPacket, timeout_s: float) -> list[np.ndarray]:
        import ray

        try:
            arrays = ray.get(packet.refs[0], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as err:
            raise WeightSyncError(f"weights v{packet.version} did not arrive within {timeout_s}s") from err
        return verified(arrays, packet)


class FileChannel:
    """Weights travel as .npz files on shared storage (written to a temp name, then renamed: never partial)."""

    method = "files"

    def __init__(self, directory: str | Path, keep: int = 2):
        self.dir = Path(directory)
        self.keep = keep

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / f"weights_v{version:08d}.npz"
        tmp = self.dir / f".weights_v{version:08d}.{os.getpid()}.tmp.npz"
        np.savez(tmp, *arrays)
        os.replace(tmp, final)
        for old in sorted(self.dir.glob("weights_v*.npz"))[: -self.keep]:
            old.unlink(missing_ok=True)
        return WeightPacket(version, arrays_checksum(arrays), sum(a.nbytes for a in arrays), path=str(final))

    def fetch(self, packet: WeightPacket, timeout_s: float) -> list[np.ndarray]:
        deadline = time.monotonic() + timeout_s
        path = Path(packet.path)
        while not path.exists():
            if time.monotonic() > deadline:
                raise WeightSyncError(f"weights file {path} (v{packet.version}) did not appear within {timeout_s}s")
            time.sleep(0.05)
        with np.load(path) as data:
            arrays = [data[f"arr_{i}"] for i in range(len(data.files))]
        return verified(arrays, packet)


def verified(arrays: list[np.ndarray], packet: WeightPacket) -> list[np.ndarray]:
    got = arrays_checksum(arrays)
    if got != packet.checksum:
        raise WeightSyncError(f"weights v{packet.version}: checksum {got} != published {packet.checksum}")
    return arrays


def make_channel(method: str, directory: str | Path | None):
    if method == "object_store":
        return ObjectStoreChannel()
    if method == "files":
        if directory is None:
            raise ValueError("rollout.weight_sync.dir must be set for method=files")
        return FileChannel(directory)
    raise ValueError(f"rollout.weight_sync.method={method!r}; allowed: object_store, files")
