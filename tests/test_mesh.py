"""The trainer on a multi-device mesh: 8 simulated CPU devices in a subprocess (this process already has JAX
initialised with one device). One subprocess runs every check of tests/mesh_script.py; the tests assert on its
JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marin_rl.config.spec import HardwareConfig, MeshConfig
from marin_rl.training.mesh import resolve_mesh_shape

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def mesh_results(tmp_path_factory) -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, str(TESTS / "mesh_script.py"), "equal_loss,bytes,reshard,shared_prompts", str(tmp_path_factory.mktemp("mesh"))],
        env=env, capture_output=True, text=True, timeout=300,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_step_on_2x2x2_mesh_equals_one_device(mesh_results):
    r = mesh_results["equal_loss"]
    assert r["single"]["devices"] == 1 and r["mesh"]["devices"] == 8  # really placed on 1 vs 8 devices
    assert r["mesh"]["mesh"] == {"data": 2, "fsdp": 2, "model": 2}
    for single, sharded in zip(r["single"]["losses"], r["mesh"]["losses"], strict=True):
        assert abs(single - sharded) <= 1e-5
    assert r["param_max_abs_diff"] <= 1e-5  # after two AdamW steps with 2 micro-batches each
    assert r["opt_max_abs_diff"] <= 1e-5


def test_shared_prompt_step_on_2x2x2_mesh_equals_one_row_per_response(mesh_results):
    r = mesh_results["shared_prompts"]
    losses = r["losses"]
    assert losses["single"] == pytest.approx(losses["plain"], rel=1e-5, abs=1e-6)
    assert losses["mesh"] == pytest.approx(losses["plain"], rel=1e-5, abs=1e-6)
    # one AdamW step of lr 3e-3 moves a weight by up to ~3e-3: the layouts agree to float rounding
    assert r["param_max_abs_diff_single"] < 1e-5 and r["param_max_abs_diff_mesh"] < 1e-5, r


def test_parameters_and_optimizer_state_split_four_ways(mesh_results):
    r = mesh_results["bytes"]
    # figures (tiny model, fsdp=2 x model=2): total 108160 B, 27200 B per device, norms 640 B
    assert len(r["per_device"]) == 4
    for held in r["per_device"]:
        assert held <= r["total"] / 4 + r["norm_bytes"]
    for held in r["opt_per_device"]:
        assert held <= r["opt_total"] / 4 + 2 * r["norm_bytes"] + 64  # Adam moments + replicated counters


def test_checkpoint_reshards_8_to_2_to_1_devices(mesh_results):
    r = mesh_results["reshard"]
    assert r["devices"] == {"8": [8], "2": [2], "1": [1]}
    assert r["equal_8_2"] and r["equal_8_1"]  # every leaf (params, Adam moments, step, key) bit-identical
    assert r["extra2"] == {"from": 8} and r["step"] == 1
    assert r["hf_export_equal"]  # HF export of the 8-device sharded policy reads back bit-identical
    assert r["embed_sharding_2"] == "P('model', 'fsdp')"  # restored sharded, not replicated
    assert abs(r["next_loss"][0] - r["next_loss"][1]) <= 1e-5
    assert r["next_param_max_abs_diff"] <= 1e-5


def test_mesh_sizes_resolve_the_rest_and_refuse_too_many_devices():
    assert resolve_mesh_shape({"data": 2, "fsdp": -1, "model": 2}, 8) == {"data": 2, "fsdp": 2, "model": 2}
    assert resolve_mesh_shape({"data": 1, "fsdp": 2, "model": 1}, 8) == {"data": 1, "fsdp": 2, "model": 1}
    with pytest.raises(ValueError, match="hardware.trainer_mesh.*needs 16 devices but the actor has 8"):
        resolve_mesh_shape({"data": 2, "fsdp": 4, "model": 2}, 8)
    with pytest.raises(ValueError, match="not divisible"):
        resolve_mesh_shape({"data": 3, "fsdp": -1, "model": 1}, 8)
    with pytest.raises(ValueError, match="at most one mesh axis may be -1"):
        HardwareConfig(name="x", accelerator="cpu", trainer_mesh=MeshConfig(data=-1, fsdp=-1))


def test_spans_hosts_reads_jax_and_cloud_tpu_environments():
    from marin_rl.training.multihost import spans_hosts

    assert not spans_hosts({})
    assert not spans_hosts({"TPU_WORKER_HOSTNAMES": "t1v-0"})  # one v5p-8 host: single process
    assert spans_hosts({"TPU_WORKER_HOSTNAMES": "t1v-0,t1v-1"})
    assert spans_hosts({"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234", "JAX_NUM_PROCESSES": "2"})
    assert not spans_hosts({"JAX_COORDINATOR_ADDRESS": "10.0.0.2:1234", "JAX_NUM_PROCESSES": "1"})
