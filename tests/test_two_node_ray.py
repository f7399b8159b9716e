"""A short RL run on a real two-node local Ray cluster: two raylets on this machine, each with a custom resource that
stands for one accelerator host ({"host_a": 1} / {"host_b": 1}), token authentication on, the run joining through
`ray.address`. The trainer asks for host_a and the rollout worker for host_b; the run's own summary.json must show
them on different node ids. Both raylets are stopped at the end, whatever happens (their process groups only)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from e2e import SHORT_RUN, launch_cmd, run_env, summary

from marin_rl.runtime.ray_security import ensure_private_token

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(token: Path) -> dict:
    # every node: token auth with the same 0600 token file; the "multi-node on one machine" switch Ray requires
    # here for a second raylet to join (measured: with it unset the join is refused)
    return dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", JAX_PLATFORMS="cpu")


def start_node(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    """`ray start --block ...` in its own process group, so stopping it stops exactly what it started."""
    return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", *args],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop_node(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_nodes(address: str, env: dict, count: int, started: list, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in started), "a `ray start` exited: see head.log / worker.log"
        status = subprocess.run([RAY, "status", f"--address={address}"], env=env, capture_output=True,
                                text=True, timeout=60).stdout
        if status.count(" node_") >= count:
            return
        time.sleep(1)
    raise AssertionError(f"the cluster at {address} never had {count} nodes:\n{status}")


REFUSAL_SCRIPT = """
import sys
import ray
sys.path.insert(0, "tests")
from spec_helpers import compose_spec
from marin_rl.runtime.driver import RunDriver
ray.init(address=sys.argv[1], log_to_driver=False)
try:
    RunDriver(compose_spec(["recipe=quickstart", "rollout.weight_sync.method=shared_memory"]), sys.argv[2])
except ValueError as err:
    print("refused:", err)
auto = RunDriver(compose_spec(["recipe=quickstart"]), sys.argv[2] + "-auto")
print("auto chose:", auto.spec.rollout.weight_sync.method, auto.weights_dir)
"""


def assert_shared_memory_is_refused_on(address: str, driver_env: dict, tmp_path: Path) -> None:
    """A driver connected to a multi-node Ray without ray.address (a sweep job under hydra/launcher=ray) refuses
    rollout.weight_sync.method=shared_memory before any actor starts, and method=auto takes the object store."""
    out = subprocess.run([sys.executable, "-c", REFUSAL_SCRIPT, address, str(tmp_path / "refused")],
                         cwd=Path(__file__).resolve().parents[1], env=driver_env, capture_output=True, text=True,
                         timeout=120)
    assert "refused: rollout.weight_sync.method=shared_memory needs every actor on one node; this Ray has 2 nodes" in (
        out.stdout
    ), out.stdout[-2000:] + out.stderr[-2000:]
    assert "auto chose: object_store None" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.timeout(300)
def test_trainer_and_worker_run_on_different_nodes(tmp_path):
    token = ensure_private_token(tmp_path / "token")
    env = cluster_env(token)
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[subprocess.Popen] = []
    ray_dir = tempfile.mkdtemp(prefix="mrl-ray-")
    try:
        nodes.append(start_node([
            "--head", f"--port={port}", "--num-cpus=2", '--resources={"host_a": 1}', "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}", f"--temp-dir={ray_dir}",  # short: AF_UNIX paths <= 107 bytes
        ], env, tmp_path / "head.log"))
        wait_for_nodes(address, env, 1, nodes)
        nodes.append(start_node([f"--address={address}", "--num-cpus=1", '--resources={"host_b": 1}'],
                                env, tmp_path / "worker.log"))
        wait_for_nodes(address, env, 2, nodes)

        run_dir = tmp_path / "run"
        # the driver joins as a client on this machine: token auth, and the switch at 0 so it dials 127.0.0.1
        driver_env = {**run_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                      "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
        out = subprocess.run(launch_cmd(
            *SHORT_RUN, "train.steps=2", "sft.warmstart=false", "train.eval_prompts=8", f"ray.address={address}",
            "+hardware.trainer_resources.resources.host_a=1", "+hardware.rollout_resources.resources.host_b=1",
            f"hydra.run.dir={run_dir}",
        ), cwd=Path(__file__).resolve().parents[1], env=driver_env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        s = summary(run_dir)
        assert s["status"] == "completed" and s["steps"] == 2
        trainer_node, worker_nodes = s["nodes"]["trainer"], s["nodes"]["rollout_workers"]
        assert len(worker_nodes) == 1 and trainer_node and worker_nodes[0]
        assert trainer_node != worker_nodes[0], s["nodes"]
        assert_shared_memory_is_refused_on(address, driver_env, tmp_path)
    finally:
        for proc in reversed(nodes):
            stop_node(proc)
        shutil.rmtree(ray_dir, ignore_errors=True)
