"""One of two JAX processes training the tiny policy on a mesh that spans both (see tests/test_multihost.py).

Usage (per process): XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT
JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=<0|1> python tests/multihost_script.py DIR

Every process runs the same calls: join the process group, two train steps with gradient accumulation on
hardware.trainer_mesh {data: 1, fsdp: 2, model: 2} over the 4 devices of both processes, gather the weights
(weight_sync.model_to_arrays) and save a checkpoint into DIR/checkpoints. Process 0 also writes every state leaf,
gathered to the host, into DIR/state.npz. Each process prints one JSON line of results; the pytest side asserts.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys

import jax
import numpy as np
from tiny_policy import BATCH, MODEL, OPTIMIZER, TEMPERATURE, arithmetic_batch, tiny_model

from marin_rl.config.spec import HardwareConfig, MeshConfig, TrainConfig
from marin_rl.objectives import LossConfig
from marin_rl.runtime.weight_checksum import arrays_checksum
from marin_rl.runtime.weight_sync import host_array, model_to_arrays
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.mesh import mesh_sizes
from marin_rl.training.multihost import initialize_distributed
from marin_rl.training.trainer import Trainer

MESH = {"data": 1, "fsdp": 2, "model": 2}
MICRO_BATCH = 4  # 2 micro-batches of the 8-row batch: gradient accumulation across both processes' devices
STEPS_SEEDS = (1, 2)  # arithmetic_batch seeds of the two steps (the pytest side replays them on one device)
INIT_KEY = 3


def host_leaves(tree) -> list[np.ndarray]:
    """Every array leaf of `tree` as a full host array (a collective: every process must call it)."""
    return [host_array(x) for x in jax.tree.leaves(tree)]


def mesh_processes(mesh) -> list:
    """The process index of every device of the mesh grid, in the grid's (data, fsdp, model) layout."""
    return np.vectorize(lambda d: d.process_index)(mesh.devices).tolist()


def socket_inodes() -> set[str]:
    """Inodes of this process's open sockets (/proc/self/fd links read "socket:[INODE]")."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # closed since the listing (the listing's own descriptor)
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    return inodes


def proc_net_address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address of /proc/net/tcp{,6}: the IP in 32-bit little-endian words of hex."""
    raw = b"".join(bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, len(hex_address), 8))
    return ipaddress.ip_address(raw)


def listening() -> list[list]:
    """[address, port, loopback] of every TCP socket this process listens on (the coordinator, gloo's pairs)."""
    inodes, found = socket_inodes(), []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in open(table).read().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN, one of ours
                hex_ip, hex_port = fields[1].split(":")
                ip = proc_net_address(hex_ip)
                loopback = ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)
                found.append([str(ip), int(hex_port, 16), loopback])
    return found


def main(folder: str) -> dict:
    joined = initialize_distributed()  # before anything touches a JAX device
    model, tokenizer, _ = tiny_model()
    hardware = HardwareConfig(name="cpu", accelerator="cpu", trainer_mesh=MeshConfig(**MESH))
    train = TrainConfig(batch_size=BATCH, micro_batch_size=MICRO_BATCH, steps=10)
    trainer = Trainer(MODEL, OPTIMIZER, LossConfig(name="test"), train, hardware, TEMPERATURE)
    state = trainer.init_state(model, jax.random.PRNGKey(INIT_KEY))
    losses = []
    for seed in STEPS_SEEDS:
        state, metrics = trainer.train_step(state, arithmetic_batch(tokenizer, seed))
        losses.append(metrics["loss/total"])
    embed = state.model.embeddings.token_embeddings.weight.array
    weights = model_to_arrays(state.model)  # what the trainer actor publishes
    leaves = host_leaves(state)
    if jax.process_index() == 0:
        np.savez(f"{folder}/state.npz", *leaves)
    saved = ckpt.save_checkpoint(
        ckpt.checkpoint_path(f"{folder}/checkpoints", int(state.step)), state, {"processes": jax.process_count()},
        model_config=MODEL, keep=1,
    )
    return {
        **joined,
        "listening": listening(),
        "cpu_collectives": jax.config.jax_cpu_collectives_implementation,
        "mesh": mesh_sizes(trainer.mesh),
        "mesh_processes": mesh_processes(trainer.mesh),
        "embed_fully_addressable": embed.is_fully_addressable,
        "embed_local_shards": len(embed.addressable_shards),
        "losses": losses,
        "weights_checksum": arrays_checksum(weights),
        "weights_equal_state": all(np.array_equal(w, x) for w, x in zip(weights, host_leaves(state.model), strict=True)),
        "checkpoint": str(saved),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])), flush=True)
