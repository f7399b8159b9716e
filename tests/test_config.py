"""Foundation: every config group option and every recipe composes and validates; bad input fails clearly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from spec_helpers import CONF, ROOT, compose_spec

from marin_rl.config.spec import SpecError

GROUPS = ["env", "loss", "sampler", "hardware", "model", "optimizer"]


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def recipes() -> list[str]:
    return sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))


def test_every_group_has_its_required_options():
    required = {
        "env": {"mock", "math500", "gsm8k"},
        "loss": {"dapo_global", "dapo_per_example", "grpo", "dr_grpo", "gspo", "rloo"},
        "sampler": {"default"},
        "hardware": {"cpu", "tpu_v5p_8", "gpu_8xh100"},
        "model": {"tiny", "llama3_1_8b_instruct"},
        "optimizer": {"adamw"},
    }
    for group, names in required.items():
        assert names <= set(group_options(group)), group
    assert len(group_options("sampler")) >= 2
    assert any(name.startswith("qwen") for name in group_options("model"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in group_options(g)])
def test_every_group_option_validates(group, option):
    # Hardware and model options only make sense together with what they can host; pair them as a user would.
    extra = []
    if group == "hardware" and option != "cpu":
        extra = ["model=llama3_1_8b_instruct", "sampler.max_new_tokens=512"]
    if group == "env" and option == "classification":
        extra = ["env.components.0.path=/data/labels.jsonl"]  # a user's own file: required, no default
    if group == "sampler" and option == "eval_greedy":
        extra = ["mode=eval"]
    spec = compose_spec([f"{group}={option}", *extra])
    assert getattr(spec, group).name == option


@pytest.mark.parametrize("recipe", recipes())
def test_every_recipe_validates(recipe):
    spec = compose_spec([f"recipe={recipe}", "dry_run=true"])
    assert spec.run_name == recipe


def test_recipe_math500_matches_the_seed_run():
    spec = compose_spec(["recipe=math500_llama3_8b_dapo"])
    assert spec.model.name == "llama3_1_8b_instruct"
    assert spec.env.name == "math500"
    assert spec.train.batch_size == 1024 and spec.rollout.n_generations == 16
    assert (spec.loss.clip_eps_low, spec.loss.clip_eps_high) == (0.2, 0.28)
    assert spec.sampler.temperature == 1.0
    assert spec.rollout.mode == "inflight" and spec.rollout.max_staleness == 1
    assert spec.hardware.name == "tpu_v5p_8"


def test_command_line_overrides_beat_the_recipe():
    spec = compose_spec(["recipe=quickstart", "optimizer.lr=5e-4", "loss=grpo", "train.batch_size=64"])
    assert spec.optimizer.lr == 5e-4 and spec.loss.name == "grpo" and spec.train.batch_size == 64


@pytest.mark.parametrize(
    "overrides,needles",
    [
        (["optimizer.lr=-1"], ["optimizer.lr", "-1", "> 0"]),
        (["train.batch_size=60", "rollout.n_generations=8"], ["train.batch_size=60", "rollout.n_generations=8", "56"]),
        (["loss.clip_eps_low=1.5"], ["loss.clip_eps_low", "1.5"]),
        (["loss.clip_eps_low=0.3", "loss.clip_eps_high=0.1"], ["loss.clip_eps_high", "clip_eps_low"]),
        (["sampler.max_new_tokens=500"], ["sampler.max_new_tokens=500", "model.max_seq_len=128"]),
        (["hardware.inference_backend=vllm"], ["hardware.inference_backend=vllm", "model.num_heads=4", "= 16", "32"]),
        (["hardware.inference_backend=tpu_inference"], ["tpu_inference", "Python >= 3.12", "'levanter', 'vllm'"]),
        (["rollout.kv_on_swap=keep"], ["rollout.kv_on_swap='keep'", "rollout.mode=sync", "recompute"]),
        (["loss.mis.enabled=true"], ["loss.mis.enabled=true", "loss.ratio_baseline=recompute"]),
        (["loss.mis.low=1.5"], ["loss.mis", "low < 1 < high"]),
        (["rollout.mode=bogus"], ["rollout.mode", "bogus", "sync", "inflight", "one_step_off"]),
        (["+train.batchsize=3"], ["unknown key", "train.batchsize"]),
        (["rollout.replay.max_reuse=2"], ["rollout.replay.max_reuse=2", "rollout.mode=sync", "max_reuse=1"]),
        (["hardware.num_rollout_workers=17"], ["hardware.num_rollout_workers=17", "8 prompts", "<= 8"]),
        (["mode=sft", "hardware.trainer_mesh={data: 1, fsdp: 2, model: 1}", "hardware.trainer_processes=2"],
         ["mode=sft", "hardware.trainer_processes=2", "trainer_processes=1"]),
        (["hardware.trainer_mesh={data: 1, fsdp: 2, model: 1}", "hardware.trainer_processes=2", "sft.warmstart=true",
          "sft.steps=10"],
         ["sft.warmstart", "hardware.trainer_processes=2", "sft.warmstart=false"]),
        (["rollout.weight_sync.method=shared_memory", "ray.address=10.0.0.1:6379"],
         ["rollout.weight_sync.method=shared_memory", "ray.address='10.0.0.1:6379'", "object_store", "ray.address=null"]),
        (["rollout.weight_sync.dir=/tmp/w"], ["rollout.weight_sync.dir='/tmp/w'", "method=auto", "method=files"]),
        (["rollout.weight_sync.method=rdma"], ["rollout.weight_sync.method", "rdma", "shared_memory", "files"]),
        (["hardware.trainer_mesh={data: 1, fsdp: 3, model: 1}", "hardware.trainer_processes=2", "sft.warmstart=false"],
         ["hardware.trainer_processes=2", "must divide", "hardware.trainer_mesh"]),
    ],
)
def test_bad_values_name_the_key_and_the_allowed_values(overrides, needles):
    with pytest.raises(SpecError) as err:
        compose_spec(overrides)
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))


def _launch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def test_cli_dry_run_prints_spec_and_plan(tmp_path):
    out = _launch("env=math500", "loss=dapo_global", "dry_run=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "math500" in out.stdout and "dapo_global" in out.stdout
    assert "clip_eps_high: 0.28" in out.stdout
    assert "actor plan" in out.stdout and "rollout_worker" in out.stdout and "trainer" in out.stdout
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    assert spec["env"]["name"] == "math500"


def test_cli_unknown_group_option_lists_the_options(tmp_path):
    out = _launch("loss=nope", "dry_run=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0
    assert "nope" in out.stderr and "dapo_global" in out.stderr and "grpo" in out.stderr


def test_cli_bad_value_exits_nonzero_naming_the_key(tmp_path):
    out = _launch("optimizer.lr=-1", "dry_run=true", f"hydra.run.dir={tmp_path}")
    assert out.returncode != 0
    assert "optimizer.lr" in out.stderr


def test_cli_multirun_dry_run_writes_one_spec_per_job(tmp_path):
    out = _launch(
        "-m", "optimizer.lr=1e-6,2e-6", "train.batch_size=64,128", "dry_run=true", f"hydra.sweep.dir={tmp_path}"
    )
    assert out.returncode == 0, out.stderr
    specs = sorted(tmp_path.glob("*/spec.yaml"))
    assert len(specs) == 4
    combos = {(s["optimizer"]["lr"], s["train"]["batch_size"]) for s in map(yaml.safe_load, map(Path.read_text, specs))}
    assert combos == {(1e-6, 64), (1e-6, 128), (2e-6, 64), (2e-6, 128)}
