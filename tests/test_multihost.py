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
from tiny_policy import arithmetic_batch, tiny_model, tiny_trainer

from marin_rl.runtime.weight_sync import arrays_checksum
from marin_rl.training import checkpoint as ckpt

TESTS = Path(__file__).parent
PROCESSES = 2
LOCAL_DEVICES = 2
TIMEOUT_S = 600  # both processes together; compiles across a busy 2-core machine are slow, a hang is not


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(folder: Path) -> list[dict]:
    """Start the PROCESSES script processes, wait for all (killing every one on any failure or timeout); the RESULT
    JSON of each, by process id."""
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={LOCAL_DEVICES}",
        "JAX_PLATFORMS": "cpu",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}",
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
def two_processes(tmp_path_factory) -> tuple[list[dict], Path]:
    folder = tmp_path_factory.mktemp("multihost")
    return run_processes(folder), folder


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


def test_two_processes_form_one_mesh_across_the_process_boundary(two_processes):
    results, _ = two_processes
    assert [r["process_index"] for r in results] == [0, 1]
    for r in results:
        assert (r["process_count"], r["devices"], r["local_devices"]) == (PROCESSES, 4, LOCAL_DEVICES)
        assert r["mesh"] == MESH
        # (data, fsdp, model) grid of process indices: the fsdp axis crosses the processes, model stays inside
        assert r["mesh_processes"] == [[[0, 0], [1, 1]]]
        assert not r["embed_fully_addressable"] and r["embed_local_shards"] == LOCAL_DEVICES


def test_two_process_steps_equal_one_device(two_processes, one_device):
    results, folder = two_processes
    losses, state = one_device
    for r in results:
        for single, spanning in zip(losses, r["losses"], strict=True):
            assert abs(single - spanning) <= 1e-5
    leaves = saved_leaves(folder)
    single = [np.asarray(x) for x in jax.tree.leaves(state)]
    assert len(leaves) == len(single)
    # parameters, Adam moments, step and key after two AdamW steps with 2 micro-batches each
    assert max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(leaves, single, strict=True)) <= 1e-5


def test_published_weights_are_gathered_whole_on_every_process(two_processes, one_device):
    results, folder = two_processes
    n_model = len(jax.tree.leaves(one_device[1].model))
    expected = arrays_checksum(saved_leaves(folder)[:n_model])
    for r in results:
        assert r["weights_equal_state"]
        assert r["weights_checksum"] == expected  # every process holds the same full weight set


def test_checkpoint_from_two_processes_restores_on_one_device(two_processes):
    results, folder = two_processes
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
