"""A short RL run whose trainer runs on 4 simulated CPU devices (trainer_mesh fsdp=2 x model=2) and whose rollout
worker samples on 2 (rollout_mesh model=2): it completes, both meshes really hold the weights (the run's own
metrics say how many devices each side's weights span), and every step logs its weight sync in bytes and seconds."""

from __future__ import annotations

import pytest
from e2e import SHORT_RUN_ANY_ENV, launch, metrics, summary

pytestmark = pytest.mark.timeout(600)

MESHES = ["hardware.trainer_mesh={data: 1, fsdp: 2, model: 2}", "hardware.rollout_mesh={data: 1, fsdp: 1, model: 2}"]
# no warm-start, 8 eval prompts, 2 steps: what is tested is the placement and the sync, not learning
FAST = ["sft.warmstart=false", "train.eval_prompts=8", "train.steps=2", "tracking.plots=false"]


def test_rl_run_with_a_4_device_trainer_and_a_2_device_sampler(tmp_path):
    out = launch(*SHORT_RUN_ANY_ENV, "env=mock", "env.components.0.task=comparison", *FAST, *MESHES,
                 f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert summary(tmp_path)["status"] == "completed"
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["trainer/weight_devices"] == 4
        assert r["sampler/weight_devices"] == 2  # the worker's sampler weights span its 2-device mesh
        # one sync per step: the published bytes, pulled once by the one worker, with its seconds on each side
        assert r["weights/sync_bytes"] > 0 and r["weights/pulled_bytes"] == r["weights/sync_bytes"]
        assert r["time/weight_publish_s"] > 0 and r["time/weight_pull_s"] > 0
