"""A trainer of hardware.trainer_processes > 1 JAX processes: one Ray actor per process, process 0 the leader.

Multi-host JAX is multi-controller (training/multihost.py): every process must run the same JAX calls on the same
values. The leader is the ordinary TrainerActor (buffer, coordinator, weight publishing, checkpoint files); each
follower is a TrainerActor too, built from the same spec, that the leader drives: it starts the followers' copy of
every call that touches JAX (prepare, each step with the step's numpy batch, checkpoints), runs its own, then waits
for theirs, so each call's completion is the barrier between steps.

The JAX coordinator (process 0's gRPC service, unauthenticated) listens on 127.0.0.1: the driver refuses to start
trainer processes on more than one Ray node, which would need it on a network address.
"""

from __future__ import annotations

import socket
from typing import Any

import numpy as np

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port free on this host's loopback interface now (for the JAX coordinator)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def jax_process_env(address: str, processes: int, index: int) -> dict[str, str]:
    """What training/multihost.py `initialize_distributed` reads to join process `index` of `processes`."""
    return {"JAX_COORDINATOR_ADDRESS": address, "JAX_NUM_PROCESSES": str(processes), "JAX_PROCESS_ID": str(index)}


def require_one_node(nodes: list[str], processes: int) -> str:
    """The one Ray node id all trainer bundles landed on; ValueError naming the key when they are spread."""
    if len(set(nodes)) != 1:
        raise ValueError(
            f"hardware.trainer_processes={processes}: the trainer processes were placed on {len(set(nodes))} Ray "
            "nodes; they must share one, since the JAX coordinator is unauthenticated and listens on 127.0.0.1 "
            "only; allowed: resources that put every trainer bundle on one node, or trainer_processes=1"
        )
    return nodes[0]


def bundle_nodes(pg: Any, bundles: range) -> list[str]:
    """The Ray node id of each of `bundles` of the reserved placement group `pg`."""
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg)["bundles_to_node_id"]
    return [table[i] for i in bundles]


def coordinator_address_on(node_id: str) -> str:
    """127.0.0.1:<a free port of node `node_id`>, asked of that node (a zero-CPU task pinned there)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(free_loopback_port)
    port = ray.get(task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote())
    return f"{LOOPBACK}:{port}"


def host_batch(batch: Any) -> Any:
    """The step's TrainBatch with numpy leaves: what the leader hands every follower."""
    import jax

    return jax.tree.map(np.asarray, batch)
