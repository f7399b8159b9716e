"""On accelerator=cpu each actor gets the simulated host devices its mesh names, through its Ray runtime env."""

from __future__ import annotations

import pytest
from spec_helpers import compose_spec

from marin_rl.runtime.actor_devices import claim_cpu_devices, with_device_count
from marin_rl.runtime.ray_cluster import actor_runtime_env

BASE = ["hardware=cpu", "train.batch_size=8", "rollout.n_generations=4"]


def xla_flags(overrides, role):
    return actor_runtime_env(compose_spec(BASE + overrides), role)["env_vars"].get("XLA_FLAGS")


def test_each_cpu_actor_gets_its_own_mesh_device_count():
    meshes = ["hardware.trainer_mesh={data: 1, fsdp: 4, model: 1}", "hardware.rollout_mesh={data: 1, fsdp: 1, model: 2}"]
    assert xla_flags(meshes, "trainer").endswith("--xla_force_host_platform_device_count=4")
    assert xla_flags(meshes, "rollout_worker").endswith("--xla_force_host_platform_device_count=2")
    assert xla_flags([], "trainer") is None and xla_flags([], "rollout_worker") is None  # 1 device: untouched
    assert xla_flags(meshes, None) is None  # the job-wide env names no device count
    gpu = ["hardware.accelerator=gpu", "hardware.rollout_resources.num_gpus=2", *meshes]
    assert xla_flags(gpu, "rollout_worker") is None  # real accelerators: the devices Ray hands out


def test_device_count_flag_replaces_an_earlier_one_and_keeps_other_flags():
    assert with_device_count("--xla_foo=1 --xla_force_host_platform_device_count=8", 2) == (
        "--xla_foo=1 --xla_force_host_platform_device_count=2"
    )


def test_a_process_whose_jax_already_started_cannot_claim_more_devices():
    """mode=sft/eval/generate claim their mesh's devices in the launching process; once JAX runs (as in this
    pytest process) that cannot take effect, so it is refused, while a one-device mesh needs nothing."""
    import jax

    jax.devices()  # the backend is up
    environ: dict[str, str] = {}
    claim_cpu_devices(compose_spec(BASE).hardware, "rollout_worker", environ)  # {1, 1, 1}: nothing to claim
    assert environ == {}
    meshes = compose_spec([*BASE, "hardware.rollout_mesh={data: 1, fsdp: 1, model: 2}"]).hardware
    with pytest.raises(RuntimeError, match="cannot take the rollout_worker mesh's devices"):
        claim_cpu_devices(meshes, "rollout_worker", environ)
    assert environ == {}
