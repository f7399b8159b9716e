"""A short RL run whose trainer is two JAX processes (hardware.trainer_processes=2): two trainer actors, 2 simulated
CPU devices each, joined through a loopback JAX coordinator into one {data: 1, fsdp: 2, model: 2} mesh; process 0
leads (buffer, weight publishing, checkpoint files) and hands process 1 every step's batch. The run completes, the
trainer's weights span the 4 devices of both processes, and its final checkpoint verifies."""

from __future__ import annotations

import pytest
from e2e import SHORT_RUN_ANY_ENV, launch, metrics, summary

from marin_rl.training.checkpoint import checkpoint_step, latest_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TWO_PROCESSES = [
    "hardware.trainer_processes=2",
    "hardware.trainer_mesh={data: 1, fsdp: 2, model: 2}",
    "ray.num_cpus=3",  # a CPU for each trainer process and the rollout worker
]
# no warm-start (spec.py refuses it with trainer_processes > 1), 8 eval prompts, 2 steps, a checkpoint each step
FAST = ["sft.warmstart=false", "train.eval_prompts=8", "train.steps=2", "train.checkpoint_every=1",
        "tracking.plots=false"]


def test_rl_run_with_a_trainer_of_two_jax_processes(tmp_path):
    base = [o for o in SHORT_RUN_ANY_ENV if not o.startswith("ray.num_cpus=")]
    out = launch(*base, "env=mock", "env.components.0.task=comparison", *FAST, *TWO_PROCESSES,
                 f"hydra.run.dir={tmp_path}", timeout=840)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert summary(tmp_path)["status"] == "completed"
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["trainer/weight_devices"] == 4  # 2 devices of each process: one mesh across both
        assert r["train/skipped"] == 0  # a real optimizer step, run by both processes
        assert r["weights/sync_bytes"] > 0 and r["weights/pulled_bytes"] == r["weights/sync_bytes"]
    final = latest_checkpoint(tmp_path / "checkpoints")  # verifies its MANIFEST
    assert final is not None and checkpoint_step(final) == 2
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))
