"""Paired comparisons across seeds: hand-worked statistics, the bootstrap property, and the report's paired section."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from marin_rl.runlog.eval_summary import wilson_interval
from marin_rl.runlog.paired import (
    holm_adjust,
    min_detectable_difference,
    pair_by_seed,
    paired_bootstrap,
    paired_t,
    seeds_needed,
)
from marin_rl.runlog.report import build_report, main

# The 3-seed example worked by hand. Baseline pass@1 per seed 0.30, 0.40, 0.50; the other configuration 0.40, 0.60,
# 0.80. Differences d = 0.1, 0.2, 0.3: mean 0.2, s_d = sqrt((0.01 + 0 + 0.01) / 2) = 0.1, se = 0.1 / sqrt(3).
# Student t with 2 dof has the closed form F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so
#   t_{0.975,2}: t / sqrt(2 + t^2) = 0.95  ->  t^2 = 2 * 0.9025 / 0.0975 = 18.5128  ->  t = 4.30265
#   t_{0.8,2}:   t / sqrt(2 + t^2) = 0.6   ->  t^2 = 2 * 0.36 / 0.64 = 1.125       ->  t = 1.06066
#   statistic 0.2 / se = 2 sqrt(3) = 3.46410, t^2 = 12: p = 2 (1 - F) = 1 - 3.46410 / sqrt(14) = 0.074180
BASELINE = {"0": 0.30, "1": 0.40, "2": 0.50}
OTHER = {"0": 0.40, "1": 0.60, "2": 0.80}
T_975_DF2 = math.sqrt(2 * 0.9025 / 0.0975)
T_80_DF2 = math.sqrt(2 * 0.36 / 0.64)
SE = 0.1 / math.sqrt(3)
P_HAND = 1 - 2 * math.sqrt(3) / math.sqrt(14)


def test_three_seed_example_by_hand():
    pairing = pair_by_seed(BASELINE, OTHER)
    assert pairing.seeds == ["0", "1", "2"]
    assert pairing.differences == pytest.approx([0.1, 0.2, 0.3])
    t = paired_t(pairing.differences)
    assert (t.n, t.mean, t.std) == (3, pytest.approx(0.2), pytest.approx(0.1))
    assert t.ci_low == pytest.approx(0.2 - T_975_DF2 * SE)  # -0.04841
    assert t.ci_high == pytest.approx(0.2 + T_975_DF2 * SE)  # 0.44841
    assert t.p_value == pytest.approx(P_HAND)  # 0.074180
    # min detectable at 3 seeds, alpha 0.05, power 0.8: (4.30265 + 1.06066) * 0.0577350 = 0.30965
    assert min_detectable_difference(t.std, 3) == pytest.approx((T_975_DF2 + T_80_DF2) * SE)


def test_pairing_lists_unpaired_seeds():
    pairing = pair_by_seed({"0": 1.0, "1": 2.0, "10": 3.0}, {"1": 2.5, "2": 0.0, "10": 3.0})
    assert pairing.seeds == ["1", "10"]  # numeric seed order, not "10" < "2"
    assert pairing.differences == [0.5, 0.0]
    assert pairing.only_baseline == ["0"] and pairing.only_other == ["2"]


def test_paired_t_degenerate_cases():
    assert math.isnan(paired_t([0.3]).ci_low) and paired_t([0.3]).n == 1
    constant = paired_t([0.1, 0.1, 0.1])
    assert (constant.ci_low, constant.ci_high, constant.p_value) == (pytest.approx(0.1), pytest.approx(0.1), 0.0)
    assert paired_t([0.0, 0.0]).p_value == 1.0


def test_holm_by_hand():
    # sorted p: 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> max with 0.06 = 0.06); NaN left out of m.
    adjusted = holm_adjust([0.01, 0.04, math.nan, 0.03])
    assert adjusted[0] == pytest.approx(0.03) and adjusted[1] == pytest.approx(0.06)
    assert math.isnan(adjusted[2]) and adjusted[3] == pytest.approx(0.06)
    assert holm_adjust([0.6, 0.5]) == [1.0, 1.0]  # capped at 1


def test_seeds_needed_is_the_smallest_enough():
    for std, difference in ((0.1, 0.05), (0.1, 0.3), (0.02, 0.01), (0.3, 0.02)):
        n = seeds_needed(std, difference)
        assert min_detectable_difference(std, n) <= difference
        assert n == 2 or min_detectable_difference(std, n - 1) > difference
    assert seeds_needed(math.nan, 0.05) is None
    assert seeds_needed(0.1, 0.05) > seeds_needed(0.1, 0.1)


def test_bootstrap_is_reproducible_and_seeded():
    differences = [0.05, -0.02, 0.11, 0.07]
    assert paired_bootstrap(differences, seed=3) == paired_bootstrap(differences, seed=3)
    low, high = paired_bootstrap(differences, seed=3)
    assert min(differences) <= low < high <= max(differences)
    assert paired_bootstrap(differences, seed=3, n_resamples=200) != paired_bootstrap(
        differences, seed=4, n_resamples=200)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=2, max_size=12),
       st.integers(0, 2**31 - 1))
def test_bootstrap_interval_covers_the_paired_t_centre(differences, seed):
    low, high = paired_bootstrap(differences, n_resamples=2000, seed=seed)
    centre = paired_t(differences).mean
    assert low - 1e-12 <= centre <= high + 1e-12


# ------------------------------------------------------------------------------------------- the report
N_PROBLEMS = 200


def write_run(run_dir: Path, loss: str, seed: int, after: float) -> None:
    """A completed run folder with Hydra overrides and a summary whose eval covers N_PROBLEMS problems."""
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra/config.yaml").write_text(yaml.safe_dump({"seed": seed, "loss": {"name": loss}}))
    (run_dir / ".hydra/overrides.yaml").write_text(yaml.safe_dump([f"loss={loss}", f"seed={seed}"]))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": after}) + "\n")
    summary = {"status": "completed", "steps": 1, "wall_seconds": 1.0, "tokens_per_second": 100.0,
               "eval_before_rl": {"pass_at_1": 0.25, "n_problems": N_PROBLEMS},
               "eval_after_rl": {"pass_at_1": after, "n_problems": N_PROBLEMS}}
    (run_dir / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def two_losses(tmp_path: Path) -> Path:
    """loss=grpo with the baseline values, loss=dapo with OTHER plus a seed 3 the baseline lacks."""
    sweep = tmp_path / "sweep"
    for seed, value in BASELINE.items():
        write_run(sweep / f"grpo-{seed}", "grpo", int(seed), value)
    for seed, value in {**OTHER, "3": 0.9}.items():
        write_run(sweep / f"dapo-{seed}", "dapo", int(seed), value)
    return sweep


def test_report_paired_section(two_losses: Path, capsys):
    assert main([str(two_losses), "--baseline", "loss=grpo", "--detect", "0.05", "--no-plots"]) == 0
    console = capsys.readouterr().out
    assert "Paired against loss=grpo" in console
    report = build_report(two_losses, baseline="loss=grpo", detect=0.05, plots=False)
    paired = report.paired
    assert paired.baseline == "loss=grpo"
    after = next(c for c in paired.comparisons if c.metric == "eval_after_rl.pass_at_1")
    assert after.other == "loss=dapo" and after.pairing.seeds == ["0", "1", "2"]
    assert after.pairing.only_other == ["3"]
    assert after.t.mean == pytest.approx(0.2) and after.t.ci_low == pytest.approx(0.2 - T_975_DF2 * SE)
    # Holm over the comparisons with a p-value: pass@1 after, the gain and the final reward (all d = 0.1..0.3;
    # before and tokens/s have d = 0, so p = 1): m = 5, so the smallest p is multiplied by 5.
    assert after.p_holm == pytest.approx(min(1.0, 5 * P_HAND))
    assert after.seeds_for_detect == seeds_needed(0.1, 0.05)
    markdown = (two_losses / "report.md").read_text()
    assert "## Paired comparisons" in markdown and "seed(s) 3 only in loss=dapo; not paired" in markdown
    assert "[-0.048, +0.448]" in markdown  # the hand-computed paired-t interval, as printed
    # evaluation noise: the Wilson half-width at n=200, averaged over the baseline's seeds
    row = next(r for r in paired.noise if r.config == "loss=grpo" and r.metric == "eval_after_rl.pass_at_1")
    widths = [(wilson_interval(p, N_PROBLEMS)[1] - wilson_interval(p, N_PROBLEMS)[0]) / 2 for p in BASELINE.values()]
    assert row.n_problems == N_PROBLEMS and row.eval_half_width == pytest.approx(sum(widths) / 3)
    assert row.seed_std == pytest.approx(0.1) and row.dominant == "seed"  # binomial sd ~0.035 << 0.1


def test_report_baseline_defaults_to_the_first_and_rejects_unknown(two_losses: Path, capsys):
    report = build_report(two_losses, plots=False)
    assert report.paired.baseline == report.groups[0].label
    with pytest.raises(SystemExit) as error:
        main([str(two_losses), "--baseline", "loss=ppo", "--no-plots"])
    assert error.value.code == 2
    assert "matches no configuration" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(two_losses), "--baseline", "optimizer.lr=1", "--no-plots"])
    assert "not swept" in capsys.readouterr().err
