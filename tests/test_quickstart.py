"""The default job (`make run`): the full quickstart recipe must raise held-out pass@1 by at least 0.2."""

from __future__ import annotations

import pytest
from e2e import launch, metrics, summary

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]  # ~3-6 minutes on 2 cores: make test-slow

REQUIRED_GAIN = 0.2  # the gate the default job is held to (issue: "visibly improves a tiny model")


def test_quickstart_improves_the_policy(tmp_path):
    out = launch("recipe=quickstart", "tracking.progress=false", f"hydra.run.dir={tmp_path}", timeout=1100)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = summary(tmp_path)
    assert result["status"] == "completed"
    assert result["steps"] == 150
    before, after = result["eval_before_rl"], result["eval_after_rl"]
    assert before["n_problems"] >= 200 and after["n_problems"] >= 200  # held-out set of at least 200 prompts
    assert after["pass_at_1"] - before["pass_at_1"] >= REQUIRED_GAIN, (before, after)
    assert result["wall_seconds"] < 600
    assert len(metrics(tmp_path)) == 150
