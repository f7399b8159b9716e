"""The trainer on a mesh that spans two JAX processes (multi-host JAX on one CPU machine).

Two subprocesses of tests/multihost_script.py, 2 simulated CPU devices each, join one process group through a
coordinator on a free loopback port (JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, read by
`initialize_distributed`); JAX's CPU cross-process collectives are gloo. They train on hardware.trainer_mesh
{data: 1, fsdp: 2, model: 2}, publish-gather the weights and save a checkpoint; this process replays the same steps
on one device and restores that checkpoint on one device. Both subprocesses are killed at the end, whatever happens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from e2e import kill_group
from multihost_script import INIT_KEY, MESH, MICRO_BATCH, STEPS_SEEDS
from spec_helpers import compose_spec
from tiny_policy import arithmetic_batch, tiny_model, tiny_trainer

from marin_rl.runtime.ray_cluster import actor_runtime_env
from marin_rl.runtime.trainer_group import jax_process_env, require_one_node
from marin_rl.runtime.weight_checksum import arrays_checksum
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.multihost import coordinator_bind_address

# `pytest -m "slow or not slow" tests/test_multihost.py` on 2026-12-03, the 2 cores shared with other work: 86 s at a
# load average of ~6, 274 s and 350 s at ~11-15 (tests/test_mesh.py: 253 s in that hour): past the ~60 s a non-slow
# test may cost
slow = pytest.mark.slow

TESTS = Path(__file__).parent
PROCESSES = 2
LOCAL_DEVICES = 2
TIMEOUT_S = 600  # both processes together; compiles across a busy 2-core machine are slow, a hang is not


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(folder: Path, port: int) -> list[dict]:
    """Start the PROCESSES script processes, wait for all (killing every one on any failure or timeout); the RESULT
    JSON of each, by process id."""
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={LOCAL_DEVICES}",
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
        "JAX_NUM_PROCESSES": str(PROCESSES),
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    logs = [folder / f"process{i}.log" for i in range(PROCESSES)]
    procs = []
    try:
        for i, log in enumerate(logs):
            procs.append(subprocess.Popen(
                [sys.executable, str(TESTS / "multihost_script.py"), str(folder)],
                env={**env, "JAX_PROCESS_ID": str(i)}, stdout=log.open("w"), stderr=subprocess.STDOUT,
                start_new_session=True,
            ))
        deadline = time.monotonic() + TIMEOUT_S
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        for proc in procs:
            kill_group(proc)
    results = []
    for proc, log in zip(procs, logs, strict=True):
        text = log.read_text()
        lines = [line for line in text.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, text[-4000:]
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> tuple[list[dict], Path, int]:
    folder, port = tmp_path_factory.mktemp("multihost"), free_port()
    return run_processes(folder, port), folder, port


@pytest.fixture(scope="module")
def one_device():
    """(losses, state) of the same two steps on one device in this process."""
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(micro_batch_size=MICRO_BATCH)
    assert trainer.mesh.devices.size == 1
    state = trainer.init_state(model, jax.random.PRNGKey(INIT_KEY))
    losses = []
    for seed in STEPS_SEEDS:
        state, metrics = trainer.train_step(state, arithmetic_batch(tokenizer, seed))
        losses.append(metrics["loss/total"])
    return losses, state


def saved_leaves(folder: Path) -> list[np.ndarray]:
    """Every leaf of the 2-process state after the steps (process 0 gathered them to the host)."""
    with np.load(folder / "state.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


@slow
def test_two_processes_form_one_mesh_across_the_process_boundary(two_processes):
    results, _, _ = two_processes
    assert [r["process_index"] for r in results] == [0, 1]
    for r in results:
        assert (r["process_count"], r["devices"], r["local_devices"]) == (PROCESSES, 4, LOCAL_DEVICES)
        assert r["cpu_collectives"] == "gloo"
        assert r["mesh"] == MESH
        # (data, fsdp, model) grid of process indices: the fsdp axis crosses the processes, model stays inside
        assert r["mesh_processes"] == [[[0, 0], [1, 1]]]
        assert not r["embed_fully_addressable"] and r["embed_local_shards"] == LOCAL_DEVICES


@slow
def test_coordinator_and_collectives_listen_on_loopback_only(two_processes):
    results, _, port = two_processes
    assert port in [p for _, p, _ in results[0]["listening"]]  # process 0 runs the coordinator service
    for r in results:
        assert r["listening"] and all(loopback for _, _, loopback in r["listening"]), r["listening"]


@slow
def test_two_process_steps_equal_one_device(two_processes, one_device):
    results, folder, _ = two_processes
    losses, state = one_device
    for r in results:
        for single, spanning in zip(losses, r["losses"], strict=True):
            assert abs(single - spanning) <= 1e-5
    leaves = saved_leaves(folder)
    single = [np.asarray(x) for x in jax.tree.leaves(state)]
    assert len(leaves) == len(single)
    # parameters, Adam moments, step and key after two AdamW steps with 2 micro-batches each
    assert max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(leaves, single, strict=True)) <= 1e-5


@slow
def test_published_weights_are_gathered_whole_on_every_process(two_processes, one_device):
    results, folder, _ = two_processes
    n_model = len(jax.tree.leaves(one_device[1].model))
    expected = arrays_checksum(saved_leaves(folder)[:n_model])
    for r in results:
        assert r["weights_equal_state"]
        assert r["weights_checksum"] == expected  # every process holds the same full weight set


@slow
def test_checkpoint_from_two_processes_restores_on_one_device(two_processes):
    results, folder, _ = two_processes
    path = Path(results[0]["checkpoint"])
    assert [r["checkpoint"] for r in results] == [str(path)] * PROCESSES
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no .tmp left behind
    model, _, _ = tiny_model()
    trainer = tiny_trainer(micro_batch_size=MICRO_BATCH)
    restored, extra = ckpt.restore_checkpoint(path, trainer.init_state(model), mesh=trainer.mesh)  # verifies MANIFEST
    assert extra == {"processes": PROCESSES} and ckpt.checkpoint_step(path) == len(STEPS_SEEDS)
    assert ckpt.read_model_config(path).name == "tiny-test"
    leaves = [np.asarray(x) for x in jax.tree.leaves(restored)]
    assert all(np.array_equal(a, b) for a, b in zip(saved_leaves(folder), leaves, strict=True))


def test_coordinator_binds_only_where_the_processes_dial():
    # JAX's default would be every interface ([::]:port) for an unauthenticated service
    assert coordinator_bind_address({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234"}) == "127.0.0.1:1234"
    explicit = {"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234", "JAX_COORDINATOR_BIND_ADDRESS": "10.0.0.2:1234"}
    assert coordinator_bind_address(explicit) == "10.0.0.2:1234"
    assert coordinator_bind_address({"TPU_WORKER_HOSTNAMES": "t1v-0,t1v-1"}) is None  # Cloud TPU: JAX decides


SPEC = ["hardware=cpu", "train.batch_size=8", "rollout.n_generations=4", "sft.warmstart=false"]
FOUR_DEVICES = "hardware.trainer_mesh={data: 1, fsdp: 2, model: 2}"


def test_trainer_processes_each_get_their_share_of_the_trainer_mesh():
    spec = compose_spec([*SPEC, FOUR_DEVICES, "hardware.trainer_processes=2"])
    assert actor_runtime_env(spec, "trainer")["env_vars"]["XLA_FLAGS"].endswith("device_count=2")
    assert jax_process_env("127.0.0.1:5000", 2, 1) == {
        "JAX_COORDINATOR_ADDRESS": "127.0.0.1:5000", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
    with pytest.raises(ValueError, match=r"hardware.trainer_processes=3 must divide the devices"):
        compose_spec([*SPEC, FOUR_DEVICES, "hardware.trainer_processes=3"])
    with pytest.raises(ValueError, match=r"sft.warmstart with hardware.trainer_processes=2"):
        compose_spec([*SPEC, FOUR_DEVICES, "hardware.trainer_processes=2", "sft.warmstart=true", "sft.steps=5"])


def test_trainer_processes_on_two_ray_nodes_are_refused():
    assert require_one_node(["n1", "n1"], 2) == "n1"
    with pytest.raises(ValueError, match=r"hardware.trainer_processes=2: .* on 2 Ray nodes"):
        require_one_node(["n1", "n2"], 2)
