"""RL with hardware.inference_backend=vllm learns, in sync and in-flight mode: the quickstart task with head size 32
(vLLM's CPU attention refuses the default 16), a shorter warm-start and fewer steps. The truncated-IS path is on
(ratio_baseline=recompute + tis), so the sampler/trainer mismatch correction runs against a real engine."""

from __future__ import annotations

import pytest
from e2e import launch, metrics, summary
from vllm_helpers import needs_vllm

pytestmark = [needs_vllm, pytest.mark.timeout(900)]

REQUIRED_GAIN = 0.2
VLLM_RUN = [
    "recipe=quickstart",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "hardware.inference_backend=vllm",
    "loss.ratio_baseline=recompute",
    "loss.tis.enabled=true",
    # a 90-step warm-start leaves pass@1 at 0.45 (the recipe's 100 steps reach 0.73 with this head size); measured
    # with seed 0: sync 0.449 -> 0.777, in-flight 0.449 -> 0.750 after 100 RL steps of 128 responses
    "sft.steps=90",
    "train.steps=100",
    "train.checkpoint_every=0",
    "tracking.progress=false",
    "ray.num_cpus=2",
]


@pytest.mark.parametrize("mode", ["sync", "inflight"])
def test_rl_with_vllm_rollouts_learns(tmp_path, mode):
    # in-flight: 4-step chunks, so weights can arrive inside the quickstart's <= 16-token answers (the default
    # 16-step chunk would decode most answers in one chunk)
    chunk = ["sampler.decode_chunk=4"] if mode == "inflight" else []
    out = launch(*VLLM_RUN, f"rollout.mode={mode}", *chunk, f"hydra.run.dir={tmp_path}", timeout=850)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = summary(tmp_path)
    before, after = result["eval_before_rl"]["pass_at_1"], result["eval_after_rl"]["pass_at_1"]
    print(f"vLLM {mode}: pass@1 {before:.3f} -> {after:.3f} in {result['wall_seconds']:.0f}s")
    assert after - before >= REQUIRED_GAIN, (before, after)
    rows = metrics(tmp_path)
    assert len(rows) == 100
    gaps = [r["loss/sampler_trainer_logp_gap"] for r in rows if "loss/sampler_trainer_logp_gap" in r]
    assert gaps
    if mode == "sync":  # same weights on both sides: only numerics differ (in-flight adds a policy lag)
        assert max(gaps) < 1e-3  # float32 vLLM vs the trainer (measured ~4e-7 per token on average)
    assert all(r["loss/tis_weight_mean"] > 0 for r in rows if "loss/tis_weight_mean" in r)
    assert sum(r["time/engine_weight_load_s"] for r in rows) > 0  # weights went into the engine in place
    if mode == "inflight":
        assert max(r["replay/max_staleness_used"] for r in rows) <= 1
        assert any(r.get("rollout/multi_version_fraction", 0) > 0 for r in rows)  # swaps mid-generation
