"""Joining or starting Ray for a run, and reserving the run's actors' resources as one placement group."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from marin_rl.config.spec import RunSpec
from marin_rl.runtime.actor_devices import cpu_device_env
from marin_rl.runtime.allocator import allocator_env
from marin_rl.runtime.compile_cache import compile_cache_env
from marin_rl.runtime.ray_security import require_token_auth, secure_ray_environment

# How often a job that waits for its placement group says so. It waits without a deadline: in a sweep on a small
# machine the other jobs hold the CPUs, and a queue of N jobs can wait N runs long.
RESOURCE_WAIT_REPORT_S = 30.0


def actor_runtime_env(spec: RunSpec, role: str | None = None) -> dict[str, Any]:
    """Environment of the run's actors; also set per actor, since a sweep job's Ray was started without it.
    With a role ("trainer" / "rollout_worker"), a CPU actor also gets its mesh's device count (actor_devices.py)."""
    # Actors import jax; keep them on the CPU unless the hardware group says otherwise.
    env_vars = {"JAX_PLATFORMS": "cpu"} if spec.hardware.accelerator == "cpu" else {}
    env_vars.update({"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
    env_vars.update(allocator_env(spec.hardware.malloc_hugepages))
    env_vars.update(compile_cache_env(spec.hardware.compile_cache))
    if role is not None:
        env_vars.update(cpu_device_env(spec.hardware, role))
    return {"env_vars": env_vars}


def init_ray(spec: RunSpec, run_dir: Path) -> bool:
    """Join `ray.address` or start a private local Ray bound to 127.0.0.1, token authentication on either way
    (marin_rl/runtime/ray_security.py); True if this call connected.

    Inside a Ray task (a sweep job under hydra/launcher=ray) Ray is already connected: the job reuses that
    connection, and its actors are gang-scheduled in a placement group of their own so concurrent jobs never
    share or deadlock on resources.
    """
    import ray

    if ray.is_initialized():
        require_token_auth()
        return False

    namespace = spec.ray.namespace or f"marin-rl-{uuid.uuid4().hex[:8]}"
    secure_ray_environment(local=not spec.ray.address)
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    runtime_env = actor_runtime_env(spec)
    if spec.ray.address:
        ray.init(address=spec.ray.address, namespace=namespace, runtime_env=runtime_env, log_to_driver=True)
    else:
        ray.init(
            # "local": always a new private instance; without it ray.init joins a cluster that `ray start` left
            # running on this machine (someone else's, with its own resources and listeners)
            address="local",
            num_cpus=spec.ray.num_cpus or os.cpu_count(),
            include_dashboard=spec.ray.include_dashboard,
            dashboard_host="127.0.0.1",
            _node_ip_address="127.0.0.1",
            namespace=namespace,
            runtime_env=runtime_env,
            log_to_driver=True,
        )
    return True


def actor_options(resources, **extra) -> dict:
    opts = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus, **extra}
    if resources.resources:
        opts["resources"] = dict(resources.resources)
    return opts


def resource_bundle(resources) -> dict[str, float]:
    bundle = {"CPU": resources.num_cpus, **resources.resources}
    if resources.num_gpus:
        bundle["GPU"] = resources.num_gpus
    return {k: v for k, v in bundle.items() if v}


def wait_for_placement_group(pg, bundles: list[dict[str, float]]) -> None:
    """Block until all bundles are reserved (no deadline), saying every RESOURCE_WAIT_REPORT_S what it waits for."""
    import ray

    need: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            need[key] = need.get(key, 0.0) + amount
    print(f"waiting for resources: {bundles}", flush=True)
    t0, ready = time.monotonic(), pg.ready()
    while not ray.wait([ready], timeout=RESOURCE_WAIT_REPORT_S)[0]:
        total, free = ray.cluster_resources(), ray.available_resources()
        short = {k: total.get(k, 0.0) for k, v in need.items() if v > total.get(k, 0.0)}
        why = (
            f"the cluster has only {short} in total: waiting for nodes to join"
            if short
            else f"free now: { {k: free.get(k, 0.0) for k in need} }; other jobs (e.g. of a sweep) hold the rest"
        )
        print(f"still waiting after {time.monotonic() - t0:.0f}s for {need}: {why}", flush=True)
    ray.get(ready)
