"""A real 2x2 Hydra multirun (lr x seed) of very short RL runs through the basic launcher, then the report."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest
from e2e import ROOT, SHORT_RUN, launch, run_env

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]  # 4 full runs: make test-slow


def test_sweep_then_report(tmp_path):
    out = launch(
        "-m", *SHORT_RUN, "train.steps=1", "sft.steps=10", "train.eval_prompts=8",
        "optimizer.lr=1e-3,2e-3", "seed=0,1", f"hydra.sweep.dir={tmp_path}", timeout=1100,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir() and (p / "summary.json").exists())
    assert len(job_dirs) == 4
    rep = subprocess.run([sys.executable, "-m", "marin_rl.runlog.report", str(tmp_path)], cwd=ROOT, env=run_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    rows = list(csv.DictReader((tmp_path / "report.csv").open()))
    assert len(rows) == 2  # one row per lr, the two seeds grouped
    assert {float(r["optimizer.lr"]) for r in rows} == {1e-3, 2e-3}
    for r in rows:
        assert r["n_seeds"] == "2"
        mean, lo, hi = (float(r[f"eval_after_rl.pass_at_1_{k}"]) for k in ("mean", "ci_low", "ci_high"))
        assert math.isfinite(lo) and lo <= mean <= hi
    table = (tmp_path / "report.md").read_text()
    assert "0.001" in table and "0.002" in table  # both configurations have a row
    assert (tmp_path / "reward_curves.png").exists()
