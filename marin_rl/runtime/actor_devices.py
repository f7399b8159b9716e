"""How many devices each actor's JAX sees on accelerator=cpu: as many simulated host devices as its mesh names.

On a GPU or TPU host an actor sees the accelerators Ray gives it. On the CPU, XLA shows one device per process
unless `--xla_force_host_platform_device_count=N` is in XLA_FLAGS before jax starts; the run sets it per actor
(Ray runtime_env) to the product of the actor's fixed mesh sizes (hardware.trainer_mesh for the trainer, divided
by hardware.trainer_processes for each of its processes; hardware.rollout_mesh for each rollout worker; a -1 axis
counts 1), so the meshes of a CPU run really span that
many devices. The devices share the actor's CPU cores: this exercises the sharded code paths, and it speeds up
only a sampler whose per-op costs dominate (rows over 2 devices: 1.3-1.5x at 4M parameters on 2 cores, nothing at
20M; docs/benchmarks.md "Rows over the cores").
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
ROLES = ("trainer", "rollout_worker")


def fixed_mesh_devices(mesh_cfg: Mapping[str, int]) -> int:
    """Product of the mesh sizes that are not -1 (the devices the mesh needs at least)."""
    return math.prod(size for size in mesh_cfg.values() if size != -1)


def with_device_count(xla_flags: str, n_devices: int) -> str:
    """`xla_flags` with the host device count set to n_devices (an earlier count flag is replaced)."""
    kept = [flag for flag in xla_flags.split() if not flag.startswith(DEVICE_COUNT_FLAG + "=")]
    return " ".join([*kept, f"{DEVICE_COUNT_FLAG}={n_devices}"])


def role_mesh(hardware_cfg, role: str) -> dict[str, int]:
    """The mesh config of an actor role."""
    if role not in ROLES:
        raise ValueError(f"unknown actor role {role!r}; allowed: {list(ROLES)}")
    mesh = hardware_cfg.trainer_mesh if role == "trainer" else hardware_cfg.rollout_mesh
    return mesh.model_dump()


def cpu_device_env(hardware_cfg, role: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Environment variables that give a CPU actor of `role` its mesh's devices ({} off the CPU or for 1 device)."""
    n = fixed_mesh_devices(role_mesh(hardware_cfg, role))
    if role == "trainer":  # each trainer process holds its share (spec.py checks that it divides)
        n //= hardware_cfg.trainer_processes
    if hardware_cfg.accelerator != "cpu" or n == 1:
        return {}
    return {"XLA_FLAGS": with_device_count(environ.get("XLA_FLAGS", ""), n)}


def claim_cpu_devices(hardware_cfg, role: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """Give THIS process the simulated CPU devices of `role`'s mesh (mode=eval / mode=generate sample in the
    launching process, on hardware.rollout_mesh). XLA reads the flag when its backend starts, so it must not have
    started yet; a process whose backend already runs is refused rather than left on fewer devices than asked."""
    env = cpu_device_env(hardware_cfg, role, environ)
    if not env:
        return
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            f"JAX already started in this process; it cannot take the {role} mesh's devices ({env['XLA_FLAGS']})"
        )
    environ.update(env)
