"""Multi-host JAX for a trainer that spans hosts (one process per TPU host, all running the same Trainer calls).

JAX is multi-controller: every host runs the same program, `jax.distributed.initialize` joins the processes, after
which `jax.devices()` lists every chip of every host and a `Mesh` over them (training/mesh.py builds it from
`jax.devices()`) spans the hosts. Arrays placed on such a mesh are global: each process holds only its addressable
shards. What this module gives the trainer:
- `initialize_distributed`: join the processes before any JAX device is touched (Cloud TPU slices are detected by
  JAX itself; elsewhere JAX reads JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID);
- `global_array`: a global array from a host value every process holds in full (how `Trainer.place_batch` places
  each batch, so the same code serves one process and many).
- `sync_processes`: a barrier over every process (a no-op in one process), which training/checkpoint.py puts around
  its writes: every process writes its own shards (Levanter's TensorStore serialization), process 0 alone the
  other files and the rename.
Weight publishing (runtime/weight_sync.py `model_to_arrays`) gathers leaves held by other processes
(`process_allgather`), so every process must call it.

The coordinator (process 0's gRPC service) is unauthenticated: `coordinator_bind_address` makes it listen only
where the processes dial it. runtime/trainer_group.py runs hardware.trainer_processes trainer actors as one such
group on one Ray node (coordinator on 127.0.0.1).

Exercised on this machine: tests/test_multihost.py (slow) runs two JAX processes with 2 simulated CPU devices each
(coordinator on a loopback port; JAX's CPU cross-process collectives are gloo, jax 0.10.2's default) training the
tiny policy on a {data: 1, fsdp: 2, model: 2} mesh whose fsdp axis crosses the processes: losses and state match
one device within 1e-5, the published weights are whole on both, their checkpoint restores on one device
bit-identical, and every socket they listen on is loopback; tests/test_rl_multihost.py (slow) runs an RL run with
hardware.trainer_processes=2. NOT exercised: real TPU hosts (one Ray node each: the driver refuses trainer
processes on several nodes, which would need the coordinator on a network address).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

logger = logging.getLogger(__name__)


def spans_hosts(environ: Mapping[str, str] = os.environ) -> bool:
    """True when this process is one of several JAX processes: an explicit coordinator (JAX_COORDINATOR_ADDRESS
    with JAX_NUM_PROCESSES > 1), or a Cloud TPU slice whose TPU_WORKER_HOSTNAMES lists more than one host."""
    if environ.get("JAX_COORDINATOR_ADDRESS") and int(environ.get("JAX_NUM_PROCESSES", "1")) > 1:
        return True
    return len([h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]) > 1


def coordinator_bind_address(environ: Mapping[str, str] = os.environ) -> str | None:
    """Where process 0's coordinator service listens: JAX_COORDINATOR_BIND_ADDRESS if set, else exactly the
    JAX_COORDINATOR_ADDRESS the processes dial (JAX's own default is every interface, [::]:port, and the service is
    unauthenticated: a loopback address keeps it loopback-only); None (JAX decides) on a Cloud TPU slice."""
    return environ.get("JAX_COORDINATOR_BIND_ADDRESS") or environ.get("JAX_COORDINATOR_ADDRESS") or None


def initialize_distributed(environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """Call jax.distributed.initialize() once when `spans_hosts`; {process_index, process_count, devices,
    local_devices} either way. Must run before the first JAX computation of the process."""
    if spans_hosts(environ) and not jax.distributed.is_initialized():
        num = environ.get("JAX_NUM_PROCESSES")
        pid = environ.get("JAX_PROCESS_ID")
        jax.distributed.initialize(
            coordinator_address=environ.get("JAX_COORDINATOR_ADDRESS"),
            num_processes=None if num is None else int(num),
            process_id=None if pid is None else int(pid),
            coordinator_bind_address=coordinator_bind_address(environ),
        )
        logger.info("joined JAX process group as process %d of %d", jax.process_index(), jax.process_count())
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
    }


def global_array(value: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """The global array of `value` (the full host value, identical on every process) under `sharding`: each
    process builds only the shards its own devices hold."""
    host = np.asarray(value)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def sync_processes(name: str) -> None:
    """Block until every JAX process reaches the barrier `name` (multihost_utils.sync_global_devices); a no-op
    in a single process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
