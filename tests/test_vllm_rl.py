"""RL with hardware.inference_backend=vllm: the quickstart task with head size 32 (vLLM's CPU attention refuses the
default 16). The truncated-IS path is on (ratio_baseline=recompute + tis), so the sampler/trainer mismatch
correction runs against a real engine.

`make test` holds a sync run to learning (a shorter warm-start and fewer steps than the recipe) and checks in-flight
mode's weight swaps inside generations in a short run; in-flight learning is the same 100-step run under the `slow`
marker (~5 min on 2 cores: `make test-slow`)."""

from __future__ import annotations

import pytest
from e2e import launch, metrics, summary
from vllm_helpers import needs_vllm

pytestmark = [needs_vllm, pytest.mark.timeout(900)]

REQUIRED_GAIN = 0.2
VLLM_ENGINE = [
    "recipe=quickstart",
    "model.num_heads=2",
    "model.num_kv_heads=2",
    "hardware.inference_backend=vllm",
    "loss.ratio_baseline=recompute",
    "loss.tis.enabled=true",
    "tracking.progress=false",
    "ray.num_cpus=2",
]
VLLM_RUN = [
    *VLLM_ENGINE,
    # a 90-step warm-start leaves pass@1 at 0.45 (the recipe's 100 steps reach 0.73 with this head size); measured
    # with seed 0: sync 0.449 -> 0.777, in-flight 0.449 -> 0.750 after 100 RL steps of 128 responses
    "sft.steps=90",
    "train.steps=100",
    "train.checkpoint_every=0",
]


@pytest.mark.parametrize("mode", ["sync", pytest.param("inflight", marks=pytest.mark.slow)])
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


def test_vllm_inflight_swaps_weights_inside_generations(tmp_path):
    """In-flight mode on the engine, short: no warm-start (a random policy rarely stops before 64 tokens, so
    generations outlast a train step and new weights land in the engine between 4-token chunks), staleness bounded."""
    out = launch(
        *VLLM_ENGINE, "rollout.mode=inflight", "rollout.max_staleness=1", "sampler.decode_chunk=4",
        "sampler.max_new_tokens=64", "sft.warmstart=false", "train.batch_size=32", "rollout.n_generations=4",
        "train.steps=6", "train.checkpoint_every=0", "train.eval_prompts=4", "loss.dynamic_sampling.enabled=false",
        f"hydra.run.dir={tmp_path}", timeout=850,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert summary(tmp_path)["status"] == "completed"
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert max(r["replay/max_staleness_used"] for r in rows) <= 1
    assert any(r.get("rollout/multi_version_fraction", 0) > 0 for r in rows)  # swaps mid-generation
    assert sum(r["time/engine_weight_load_s"] for r in rows) > 0  # weights went into the engine in place
    assert all(r["loss/tis_weight_mean"] > 0 for r in rows if "loss/tis_weight_mean" in r)
