"""The non-RL modes through launch.py: SFT warm-start (on a 2-device trainer mesh) -> HF export -> synthetic data ->
evaluation (on a 4-device rollout mesh)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from e2e import ROOT, launch, run_env

from marin_rl.training.checkpoint import latest_checkpoint, read_extra

pytestmark = pytest.mark.timeout(600)


def test_sft_export_generate_eval(tmp_path):
    sft_dir, hf_dir = tmp_path / "sft", tmp_path / "hf"
    out = launch("mode=sft", "recipe=quickstart", "train.steps=5", "hardware.trainer_mesh={data: 1, fsdp: 2, model: 1}",
                 f"hydra.run.dir={sft_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    ckpt = latest_checkpoint(sft_dir / "checkpoints")
    assert ckpt is not None
    assert read_extra(ckpt)["sft"]["devices"] == 2  # trained on the trainer mesh's 2 simulated devices

    exp = subprocess.run([sys.executable, "-m", "marin_rl.training.export", "--checkpoint", str(ckpt), "--out", str(hf_dir)],
                         cwd=ROOT, env=run_env(), capture_output=True, text=True, timeout=300)
    assert exp.returncode == 0, exp.stderr[-3000:]
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (hf_dir / "model.safetensors").exists() and (hf_dir / "tokenizer.json").exists()

    gen_dir = tmp_path / "gen"
    out = launch("mode=generate", "recipe=quickstart", f"model.init_checkpoint={hf_dir}", "generate.num_prompts=8",
                 "generate.n=2", "generate.keep=all", f"hydra.run.dir={gen_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in (gen_dir / "synthetic.jsonl").read_text().splitlines()]
    assert len(lines) == 16
    assert {"prompt", "response", "reward", "correct", "prompt_tokens", "response_tokens"} <= set(lines[0])

    # the evaluation samples with its weights split over 4 simulated devices (rows over data, heads over model)
    # (into a compile cache of its own: the modes that run in the launching process use it too)
    eval_dir, cache_dir = tmp_path / "eval", tmp_path / "compile_cache"
    out = launch("mode=eval", "recipe=quickstart", f"model.init_checkpoint={ckpt}", "train.eval_prompts=16",
                 "hardware.rollout_mesh={data: 2, fsdp: 1, model: 2}", f"hardware.compile_cache.dir={cache_dir}",
                 f"hydra.run.dir={eval_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((eval_dir / "summary.json").read_text())
    assert summary["eval"]["n_problems"] == 16
    assert summary["sampler_devices"] == 4
    assert len(list(cache_dir.glob("*-cache"))) == summary["programs"]["compiled"] > 0
