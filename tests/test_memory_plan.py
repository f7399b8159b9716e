"""The memory plan's arithmetic against hand-computed numbers for the tiny test model, and the refusal of a plan
that does not fit."""

from __future__ import annotations

import math

import pytest
from spec_helpers import compose_spec
from tiny_policy import MODEL

from marin_rl.config.memory import (
    check_memory_plan,
    format_memory_plan,
    memory_plan,
    model_shape,
    parameter_bytes_per_device,
)

# Tiny model: E=32, I=64, L=2, H=K=4 (D=8), V=100 (char tokenizer). Parameters:
#   embedding + LM head 2 x 100 x 32 = 6400; per layer q,k,v,o 4 x 32 x 32 = 4096, MLP 3 x 32 x 64 = 6144,
#   two norms 64 -> 10304; x 2 layers = 20608; final norm 32. Total 27040 -> 108160 bytes in float32.
# On fsdp=2 x model=2: every matrix / 4, norms / 2 (embed over fsdp only):
#   (6400 + 2 x (4096 + 6144)) / 4 + (2 x 64 + 32) / 2 = 6720 + 80 = 6800 -> 27200 bytes per device.
TOTAL_PARAMS = 27040
PER_DEVICE_BYTES_FSDP2_MODEL2 = 27200


def tiny_spec(**hardware):
    overrides = [
        "model=tiny", "model.hidden_dim=32", "model.intermediate_dim=64", "model.max_seq_len=64",
        "train.batch_size=8", "train.micro_batch_size=4", "rollout.n_generations=4", "sampler.max_new_tokens=16",
        "hardware.trainer_mesh={data: 1, fsdp: 2, model: 2}",
        "hardware.trainer_shared_prompts=false",  # it micro-batches
    ] + [f"hardware.{k}={v}" for k, v in hardware.items()]
    return compose_spec(overrides)


def test_tiny_plan_matches_hand_computed_bytes():
    spec = tiny_spec()
    shape = model_shape(spec.model)
    assert sum(math.prod(sizes) for _, sizes in shape.leaves) == TOTAL_PARAMS
    plan = memory_plan(spec, shape, n_devices=4)
    assert plan.mesh == {"data": 1, "fsdp": 2, "model": 2}
    assert plan.trainer["parameters"] == PER_DEVICE_BYTES_FSDP2_MODEL2
    assert plan.trainer["gradients"] == 2 * 27200  # accumulation on (micro 4 < batch 8): running sum + micro grads
    assert plan.trainer["optimizer"] == 2 * 27200  # Adam mu + nu
    # activations: micro 4 rows / (data 1 x fsdp 2) = 2 rows x 64 tokens = 128 tokens, c = 4 bytes, m = 2:
    #   per token 4*32 + (4+2*4)*8/2 + 4*64/2 + 3*64/2 = 128 + 48 + 128 + 96 = 400
    #   no remat: 2 layers x 128 x 4 x 400 = 409600; log-probs 2 x 128 x 100 x 4 = 102400
    assert plan.micro_rows_per_device == 2
    assert plan.trainer["activations"] == 409600 + 102400
    # sampler: float32 weights 27040 x 4; KV 2 x 2 layers x 64 rows x 4 kv heads x 64 slots x 8 x 4 bytes
    assert plan.sampler == {"weights": 108160, "kv_cache": 2097152}
    text = format_memory_plan(plan)
    assert "parameters" in text and "kv_cache" in text and "{'data': 1, 'fsdp': 2, 'model': 2}" in text


# Sampler on rollout_mesh data=2 x model=2 (fsdp 1): heads, MLP width and vocabulary split in two, norms whole:
#   embedding + LM head 6400 / 2 = 3200; per layer (4096 + 6144) / 2 + 64 = 5184, x 2 = 10368; final norm 32
#   -> 13600 params -> 54400 bytes per device. KV cache: 64 rows / data 2 = 32 rows, 4 kv heads / model 2 = 2:
#   2 x 2 layers x 32 x 2 x 64 slots x 8 x 4 bytes = 524288 (a quarter of the one-device 2097152).
def test_sampler_plan_per_device_of_the_rollout_mesh():
    spec = tiny_spec(rollout_mesh="{data: 2, fsdp: 1, model: 2}")
    plan = memory_plan(spec, model_shape(spec.model), n_devices=4)  # rollout devices: the mesh's 4 (accelerator=cpu)
    assert plan.rollout_mesh == {"data": 2, "fsdp": 1, "model": 2}
    assert plan.sampler == {"weights": 54400, "kv_cache": 524288}
    assert "rollout worker mesh {'data': 2, 'fsdp': 1, 'model': 2}" in format_memory_plan(plan)
    with pytest.raises(ValueError, match="'kv_head' of size 4 does not split over hardware.rollout_mesh"):
        memory_plan(tiny_spec(rollout_mesh="{data: 1, fsdp: 1, model: 8}"), n_devices=4)
    too_big = memory_plan(tiny_spec(device_memory_gb=0.0015), n_devices=4)  # trainer fits, the 1-device sampler not
    with pytest.raises(ValueError, match="hardware.rollout_mesh"):
        check_memory_plan(too_big)


def test_parameter_split_matches_what_haliax_places():
    """The plan's per-device parameter bytes equal the bytes tests/mesh_script.py measures on real shards."""
    shape = model_shape(MODEL)
    assert parameter_bytes_per_device(shape, {"data": 1, "fsdp": 2, "model": 2}, 4) == PER_DEVICE_BYTES_FSDP2_MODEL2
    assert parameter_bytes_per_device(shape, {"data": 2, "fsdp": 1, "model": 1}, 4) == 4 * TOTAL_PARAMS


def test_a_plan_that_does_not_fit_names_the_knobs():
    plan = memory_plan(tiny_spec(device_memory_gb=0.0001), n_devices=4)
    with pytest.raises(ValueError) as err:
        check_memory_plan(plan)
    message = str(err.value)
    for knob in ("hardware.device_memory_gb=0.0001", "train.micro_batch_size", "hardware.trainer_mesh",
                 "hardware.param_dtype=bfloat16", "model.max_seq_len"):
        assert knob in message, (knob, message)
    check_memory_plan(memory_plan(tiny_spec(device_memory_gb=1), n_devices=4))  # 1 GiB holds it: no error


def test_mesh_that_does_not_divide_a_model_axis_is_refused():
    with pytest.raises(ValueError, match="'kv_head' of size 4 does not split"):
        memory_plan(tiny_spec(**{"trainer_mesh": "{data: 1, fsdp: 1, model: 8}"}), n_devices=8)


def test_plan_refuses_a_mesh_larger_than_the_trainer_resources():
    gpu = {"accelerator": "gpu", "trainer_resources.num_gpus": 2, "rollout_resources.num_gpus": 1}
    with pytest.raises(ValueError, match="needs 4 devices but the actor has 2"):
        memory_plan(tiny_spec(**gpu))  # the trainer asks Ray for 2 GPUs: it sees 2 devices
    with pytest.raises(ValueError, match="hardware.rollout_mesh.*needs 2 devices but the actor has 1"):
        memory_plan(tiny_spec(**{**gpu, "trainer_resources.num_gpus": 4, "rollout_mesh": "{data: 1, fsdp: 1, model: 2}"}))
    # accelerator=cpu: each actor gets the simulated devices its mesh names (runtime/actor_devices.py)
    cpu = memory_plan(tiny_spec(rollout_mesh="{data: 2, fsdp: 1, model: 1}"))
    assert cpu.mesh == {"data": 1, "fsdp": 2, "model": 2} and cpu.rollout_mesh == {"data": 2, "fsdp": 1, "model": 1}


def test_dry_run_prints_the_plan_and_refuses_one_that_does_not_fit(tmp_path):
    import subprocess
    import sys

    from spec_helpers import ROOT

    def dry_run(*overrides):
        return subprocess.run(
            [sys.executable, str(ROOT / "launch.py"), "recipe=math500_llama3_8b_dapo", "dry_run=true",
             f"hydra.run.dir={tmp_path}", *overrides],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )

    fits_now = dry_run()
    assert fits_now.returncode == 0, fits_now.stderr
    assert "memory plan per device" in fits_now.stdout and "kv_cache" in fits_now.stdout
    too_big = dry_run("train.micro_batch_size=128")  # 32 rows x 4096 tokens per chip: activations double
    assert too_big.returncode == 2
    assert "memory plan does not fit hardware.device_memory_gb=95" in too_big.stderr
    assert "train.micro_batch_size" in too_big.stderr and "hardware.trainer_mesh" in too_big.stderr
