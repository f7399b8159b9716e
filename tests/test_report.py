"""Sweep report: run folders -> grouping by configuration, mean/CI over seeds, report.md/csv/PNGs, CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from marin_rl.runlog.reader import load_run, read_metrics
from marin_rl.runlog.report import build_report, main
from marin_rl.runlog.stats import mean_ci, t_quantile

REPO_ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T_975_DF1 = 12.706  # Student t quantile 0.975 with 1 dof, from any printed t table
TABLE_TOLERANCE = 1e-3  # the printed table value is rounded to 3 decimals

LRS = ["0.0001", "0.0003"]
BATCH_SIZES = [16, 32]
SEEDS = [0, 1]
# Final eval pass@1 after RL per (lr, batch size), one value per seed; before-RL pass@1 per seed.
AFTER = {
    ("0.0001", 16): [0.40, 0.60],
    ("0.0001", 32): [0.45, 0.55],
    ("0.0003", 16): [0.50, 0.70],
    ("0.0003", 32): [0.20, 0.30],
}
BEFORE = [0.30, 0.32]
STEPS = 5
EVAL_STEPS = (2, 4)


def composed_config(lr: str, batch_size: int, seed: int) -> dict:
    return {
        "mode": "rl",
        "seed": seed,
        "dry_run": False,
        "run_name": None,
        "env": {"name": "mock_addition"},
        "loss": {"name": "grpo"},
        "optimizer": {"name": "adamw", "lr": float(lr), "weight_decay": 0.0},
        "train": {"batch_size": batch_size, "steps": STEPS, "eval_every": 2},
    }


def write_run(
    run_dir: Path,
    *,
    lr: str,
    batch_size: int,
    seed: int,
    after: float | None = None,
    before: float = 0.3,
    status: str | None = "completed",
    error: str | None = None,
    steps_logged: int = STEPS,
    truncated_tail: str | None = None,
    with_overrides: bool = True,
    config_file: str = ".hydra/config.yaml",
    extra_overrides: tuple[str, ...] = ("recipe=quickstart",),
) -> Path:
    """A run folder as Hydra + the RL loop leave it; `status=None` leaves no summary.json (unfinished)."""
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (run_dir / config_file).write_text(yaml.safe_dump(composed_config(lr, batch_size, seed)))
    if with_overrides:
        overrides = [*extra_overrides, f"optimizer.lr={lr}", f"train.batch_size={batch_size}", f"seed={seed}"]
        (run_dir / ".hydra/overrides.yaml").write_text(yaml.safe_dump(overrides))
    final_reward = (after if after is not None else 0.5) - 0.1
    lines = []
    for step in range(1, steps_logged + 1):
        row = {"step": step, "time_s": 2.0 * step, "reward/mean": final_reward * step / STEPS,
               "train/pass_rate": 0.1 * step, "loss/total": 1.0 / step}
        if step in EVAL_STEPS:
            row.update({"eval/pass_at_1": before + 0.01 * step, "eval/pass_at_1_ci_low": 0.0,
                        "eval/pass_at_1_ci_high": 1.0})
        lines.append(json.dumps(row))
    text = "\n".join(lines) + "\n"
    if truncated_tail is not None:
        text += truncated_tail  # a write cut off mid-line: no closing brace, no newline
    (run_dir / "metrics.jsonl").write_text(text)
    if status is not None:
        summary = {
            "status": status,
            "error": error,
            "steps": steps_logged,
            "wall_seconds": 100.0 + seed,
            "tokens_per_second": 800.0 + 10 * seed,
            "eval_before_rl": {"pass_at_1": before, "pass_at_1_ci_low": before - 0.1,
                               "pass_at_1_ci_high": before + 0.1},
            "eval_after_rl": None if after is None else {"pass_at_1": after, "pass_at_1_ci_low": after - 0.1,
                                                          "pass_at_1_ci_high": after + 0.1},
            "final": {"reward/mean": final_reward},
        }
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """A Hydra multirun folder: 2 lr x 2 batch sizes x 2 seeds completed, one failed, one unfinished."""
    sweep = tmp_path / "multirun" / "2025-01-01" / "12-00-00"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    job = 0
    for lr in LRS:
        for batch_size in BATCH_SIZES:
            for seed in SEEDS:
                write_run(sweep / str(job), lr=lr, batch_size=batch_size, seed=seed,
                          after=AFTER[(lr, batch_size)][seed], before=BEFORE[seed])
                job += 1
    write_run(sweep / "8", lr="0.0001", batch_size=16, seed=2, after=None, status="failed",
              error="RuntimeError: rollout worker 1 died", steps_logged=2)
    write_run(sweep / "9", lr="0.0003", batch_size=32, seed=2, status=None, steps_logged=3,
              truncated_tail='{"step": 4, "time_s": 8.0, "rewa')
    return sweep


def expected_stats(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% CI for two seeds, by hand: mean +- t_{0.975,1} * s / sqrt(2)."""
    assert len(values) == 2
    mean = sum(values) / 2
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (2 - 1))
    half = T_975_DF1 * s / math.sqrt(2)
    return mean, mean - half, mean + half


def assert_close(actual: float, expected: float) -> None:
    assert actual == pytest.approx(expected, rel=TABLE_TOLERANCE, abs=1e-9)


# --------------------------------------------------------------------------------------------------- stats


def test_t_quantile_matches_printed_table():
    assert_close(t_quantile(0.975, 1), 12.706)
    assert_close(t_quantile(0.975, 5), 2.571)
    assert_close(t_quantile(0.975, 30), 2.042)
    with pytest.raises(ValueError, match="dof"):
        t_quantile(0.975, 0)


def test_mean_ci_two_three_and_one_value():
    two = mean_ci([0.4, 0.6])
    assert (two.n, two.mean) == (2, pytest.approx(0.5))
    assert_close(two.ci_high - two.mean, T_975_DF1 * 0.1)  # s = 0.1414.., s / sqrt(2) = 0.1
    assert_close(two.mean - two.ci_low, T_975_DF1 * 0.1)
    three = mean_ci([1.0, 2.0, 3.0], confidence=0.9)  # s = 1, t_{0.95,2} = 2.920
    assert_close(three.ci_high, 2.0 + 2.920 / math.sqrt(3))
    one = mean_ci([0.7])
    assert one.n == 1 and one.mean == 0.7 and math.isnan(one.ci_low) and math.isnan(one.ci_high)
    assert not one.has_ci
    assert mean_ci([]).n == 0 and math.isnan(mean_ci([]).mean)


# ------------------------------------------------------------------------------------------ reading runs


def test_read_metrics_reports_bad_lines_with_numbers(tmp_path: Path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "reward/mean": 0.1}\nnot json\n\n[1, 2]\n{"step": 2, "reward/mean": 0.2}\n{"step": 3')
    rows, notes = read_metrics(path)
    assert [row["step"] for row in rows] == [1, 2]
    assert len(notes) == 3
    assert "line 2: invalid JSON" in notes[0]
    assert "line 4: expected a JSON object" in notes[1]
    assert "line 6: truncated final line" in notes[2]


def test_load_run_unfinished_and_failed(sweep_dir: Path):
    unfinished = load_run(sweep_dir / "9")
    assert unfinished.status == "unfinished" and not unfinished.completed
    assert unfinished.last_step == 3
    assert "no summary.json" in unfinished.reason and "last step seen 3" in unfinished.reason
    assert any("line 4: truncated final line" in note for note in unfinished.notes)
    assert unfinished.seed == "2"
    failed = load_run(sweep_dir / "8")
    assert failed.status == "failed" and failed.reason == "RuntimeError: rollout worker 1 died"
    done = load_run(sweep_dir / "0")
    assert done.completed and done.curve("eval/pass_at_1") == pytest.approx({2: 0.32, 4: 0.34})
    # the plotted pass@1 line starts at eval_before_rl (step 0) and ends at eval_after_rl (the final step)
    after = done.summary["eval_after_rl"]["pass_at_1"]
    assert done.pass_at_1_curve("eval/pass_at_1") == pytest.approx({0: 0.3, 2: 0.32, 4: 0.34, STEPS: after})


# ---------------------------------------------------------------------------------------------- report


def test_build_report_groups_seeds_and_computes_ci(sweep_dir: Path):
    report = build_report(sweep_dir)

    assert report.grouping == "overrides"
    assert report.swept_keys == ["optimizer.lr", "train.batch_size"]
    assert report.fixed_settings == {"recipe": "quickstart"}
    assert len(report.rows) == 4
    rows = {(row["optimizer.lr"], row["train.batch_size"]): row for row in report.rows}
    assert set(rows) == {(lr, str(bs)) for lr in LRS for bs in BATCH_SIZES}
    for (lr, batch_size), after in AFTER.items():
        row = rows[(lr, str(batch_size))]
        assert row["n_seeds"] == 2 and row["seeds"] == "0;1"
        gains = [a - b for a, b in zip(after, BEFORE, strict=True)]
        for name, values in [("eval_after_rl.pass_at_1", after), ("eval_before_rl.pass_at_1", BEFORE),
                             ("pass_at_1_gain", gains), ("final.reward/mean", [a - 0.1 for a in after])]:
            mean, low, high = expected_stats(values)
            assert_close(row[f"{name}_mean"], mean)
            assert_close(row[f"{name}_ci_low"], low)
            assert_close(row[f"{name}_ci_high"], high)
        assert row["steps_mean"] == STEPS
        assert row["wall_seconds_mean"] == pytest.approx(100.5)  # seeds 0 and 1: 100 and 101 s
    # The failed and the unfinished run are counted against their configuration, not averaged in.
    assert rows[("0.0001", "16")]["n_incomplete"] == 1
    assert rows[("0.0003", "32")]["n_incomplete"] == 1
    assert rows[("0.0001", "32")]["n_incomplete"] == 0
    # Spot check against the issue's own example: mean of [0.4, 0.6] = 0.5, half-width 12.706 * 0.1.
    assert_close(rows[("0.0001", "16")]["eval_after_rl.pass_at_1_ci_high"], 0.5 + 1.2706)

    assert {run.path.name: run.status for run in report.incomplete_runs} == {"8": "failed", "9": "unfinished"}
    for name in ("report.md", "report.csv", "reward_curves.png", "pass_at_1_curves.png"):
        assert (sweep_dir / name).is_file(), name
    for png in ("reward_curves.png", "pass_at_1_curves.png"):
        assert (sweep_dir / png).read_bytes()[:8] == PNG_MAGIC

    with (sweep_dir / "report.csv").open(newline="") as handle:
        csv_rows = list(csv.DictReader(handle))
    assert len(csv_rows) == 4
    assert list(csv_rows[0]) == report.columns
    for csv_row in csv_rows:
        row = rows[(csv_row["optimizer.lr"], csv_row["train.batch_size"])]
        for column in ("eval_after_rl.pass_at_1_mean", "eval_after_rl.pass_at_1_ci_low",
                       "eval_after_rl.pass_at_1_ci_high", "pass_at_1_gain_ci_high"):
            assert float(csv_row[column]) == pytest.approx(row[column])

    markdown = (sweep_dir / "report.md").read_text()
    assert "## Failed or unfinished runs (2)" in markdown
    assert "RuntimeError: rollout worker 1 died" in markdown
    assert "no summary.json; last step seen 3" in markdown
    assert "seed=2" in markdown  # the overrides of the failed runs are listed
    assert "![reward_curves.png](reward_curves.png)" in markdown
    assert "![pass_at_1_curves.png](pass_at_1_curves.png)" in markdown
    assert "line 4: truncated final line" in markdown
    assert "0.500 [-0.771, 1.771]" in markdown


def test_single_seed_has_no_ci_and_run_folders_can_be_listed(tmp_path: Path):
    a = write_run(tmp_path / "runs" / "a", lr="0.0001", batch_size=16, seed=0, after=0.4)
    b = write_run(tmp_path / "runs" / "b", lr="0.0003", batch_size=16, seed=0, after=0.6)
    out = tmp_path / "report_out"
    report = build_report([a, b], out, plots=False)
    assert report.swept_keys == ["optimizer.lr"]
    assert [row["optimizer.lr"] for row in report.rows] == ["0.0001", "0.0003"]
    for row, after in zip(report.rows, [0.4, 0.6], strict=True):
        assert row["n_seeds"] == 1 and row["eval_after_rl.pass_at_1_mean"] == pytest.approx(after)
        assert math.isnan(row["eval_after_rl.pass_at_1_ci_low"])
    with (out / "report.csv").open(newline="") as handle:
        assert all(r["eval_after_rl.pass_at_1_ci_low"] == "" for r in csv.DictReader(handle))
    markdown = (out / "report.md").read_text()
    assert "0.400 (n=1)" in markdown and "## Failed or unfinished runs (0)" in markdown
    assert not (out / "reward_curves.png").exists()


def test_without_overrides_groups_by_config_and_ignores_seed(tmp_path: Path):
    for index, (lr, seed, after) in enumerate([("0.0001", 0, 0.4), ("0.0001", 1, 0.6), ("0.0003", 0, 0.5)]):
        write_run(tmp_path / f"run{index}", lr=lr, batch_size=16, seed=seed, after=after,
                  with_overrides=False, config_file="spec.yaml")
    report = build_report(tmp_path, plots=False)
    assert report.grouping == "config"
    assert report.swept_keys == ["optimizer.lr"]
    rows = {row["optimizer.lr"]: row for row in report.rows}
    assert rows["0.0001"]["n_seeds"] == 2 and rows["0.0001"]["seeds"] == "0;1"
    assert_close(rows["0.0001"]["eval_after_rl.pass_at_1_ci_high"], expected_stats([0.4, 0.6])[2])
    assert rows["0.0003"]["n_seeds"] == 1


def test_equal_override_values_written_differently_group_together(tmp_path: Path):
    write_run(tmp_path / "0", lr="1e-4", batch_size=16, seed=0, after=0.4)
    write_run(tmp_path / "1", lr="0.0001", batch_size=16, seed=1, after=0.6)
    write_run(tmp_path / "2", lr="0.0001", batch_size=16, seed=2, after=0.5,
              extra_overrides=("recipe=quickstart", "dry_run=false"))
    report = build_report(tmp_path, plots=False)
    assert len(report.rows) == 1 and report.rows[0]["n_seeds"] == 3


def test_no_run_folders_is_a_clear_error(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no run folders"):
        build_report(tmp_path)


# -------------------------------------------------------------------------------------------------- CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marin_rl.runlog.report", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_writes_report_and_prints_table(sweep_dir: Path, tmp_path: Path):
    out = tmp_path / "cli_out"
    result = run_cli(str(sweep_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "pass@1 after" in result.stdout
    assert "optimizer.lr=0.0003 train.batch_size=32" in result.stdout
    assert "Failed or unfinished runs (2)" in result.stdout
    assert "RuntimeError: rollout worker 1 died" in result.stdout
    for name in ("report.md", "report.csv", "reward_curves.png", "pass_at_1_curves.png"):
        assert (out / name).is_file(), name
    with (out / "report.csv").open(newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 4


def test_cli_help_and_missing_dir(tmp_path: Path, capsys):
    # In-process (same parser as the CLI) to save an interpreter start; the subprocess path is tested above.
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    assert "report.csv" in help_text and "--out" in help_text and "seed" in help_text
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "nope")])
    assert exit_info.value.code == 2
    assert "nope: no such directory" in capsys.readouterr().err


def test_configuration_whose_runs_all_failed_keeps_its_row(tmp_path: Path):
    write_run(tmp_path / "0", lr="0.0001", batch_size=16, seed=0, after=0.4)
    write_run(tmp_path / "1", lr="0.0001", batch_size=16, seed=1, after=0.6)
    write_run(tmp_path / "2", lr="0.0003", batch_size=16, seed=0, status="failed", error="OOM")
    report = build_report(tmp_path, plots=False, extra_metrics=["eval_after_rl.pass_at_1_ci_low"])
    rows = {row["optimizer.lr"]: row for row in report.rows}
    assert rows["0.0003"]["n_seeds"] == 0 and rows["0.0003"]["n_incomplete"] == 1
    assert math.isnan(rows["0.0003"]["eval_after_rl.pass_at_1_mean"])
    # --metric / extra_metrics: any dotted path into summary.json becomes mean/CI columns too.
    assert rows["0.0001"]["eval_after_rl.pass_at_1_ci_low_mean"] == pytest.approx(0.4)  # (0.3 + 0.5) / 2
    assert "eval_after_rl.pass_at_1_ci_low_ci_high" in report.columns
    assert "OOM" in (tmp_path / "report.md").read_text()
