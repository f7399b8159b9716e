"""Grader audit: the labelled set built from the local data, the audit CLI, and the thresholds `make test` holds.

Thresholds (audit.MAX_FP_RATE / MAX_FN_RATE, the CLI's defaults, also in docs/grader_audit.md): on the built sets
the false-positive rate (a wrong answer graded correct: reward an RL policy could learn to farm) must stay at or
below 1%, the false-negative rate (a right answer graded wrong) at or below 2%.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marin_rl.runlog.eval_summary import wilson_interval
from marin_rl.verifiers import GradingPool
from marin_rl.verifiers.audit import MAX_FN_RATE, MAX_FP_RATE, grade_rows, main
from marin_rl.verifiers.audit_set import equivalent_forms, perturbed, synthetic_rows
from marin_rl.verifiers.audit_set import main as build_main

CATEGORIES = {"reference", "equivalent", "perturbed", "box_vs_number", "number_vs_box", "several_boxes", "last_box",
              "hidden_in_text"}


def write_labels(path: Path, rows: list[tuple[str, str, bool]]) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "response": r, "gold": g, "is_correct": c}) + "\n"
                            for i, (r, g, c) in enumerate(rows)))
    return path


@pytest.mark.parametrize("env", ["math500", "gsm8k"])
def test_graders_pass_the_audit_thresholds_on_the_built_set(env, shared_data_dir, tmp_path, capsys):
    labels = tmp_path / f"{env}.jsonl"
    assert build_main(["--env", env, "--data-dir", str(shared_data_dir), "--out", str(labels)]) == 0
    rows = [json.loads(line) for line in labels.read_text().splitlines()]
    assert len(rows) >= 300
    assert {r["category"] for r in rows} == CATEGORIES
    assert 0.3 < sum(r["is_correct"] for r in rows) / len(rows) < 0.7  # both labels well represented
    assert (MAX_FP_RATE, MAX_FN_RATE) == (0.01, 0.02)  # the thresholds the docs state
    status = main(["--env", env, "--labels", str(labels)])  # the CLI's default thresholds are the gate
    out = capsys.readouterr().out
    assert status == 0, out
    assert "false-positive rate:" in out and "timeouts (" in out and "slowest" in out


@pytest.mark.parametrize("env", ["math500", "gsm8k"])
def test_hand_written_rows_are_graded_as_labelled(env):
    """The rows that need no data: equivalent spellings and the hacks (several boxes, answers hidden in text)."""
    rows = synthetic_rows(env)
    with GradingPool(1, timeout_s=5.0) as pool:
        graded = grade_rows(rows, env, pool)
    assert [g.id for g in graded if g.graded_correct != g.is_correct] == []


def test_audit_reports_misgraded_rows_with_intervals_and_fails_the_threshold(tmp_path, capsys):
    labels = write_labels(tmp_path / "labels.jsonl", [
        ("\\boxed{5}", "5", True), ("\\boxed{4}", "5", False),
        ("\\boxed{5}", "5", False),  # mislabelled on purpose: the grader accepts it -> a false positive
        ("\\boxed{0.5}", "\\frac{1}{2}", True), ("\\boxed{6}", "5", True),  # -> a false negative
    ])
    assert main(["--env", "math500", "--labels", str(labels), "--max-fp-rate", "0.6", "--max-fn-rate", "0.6"]) == 0
    out = capsys.readouterr().out
    low, high = wilson_interval(0.5, 2)
    assert f"false-positive rate: 0.500 [{low:.3f}, {high:.3f}] (1/2)" in out
    low, high = wilson_interval(1 / 3, 3)
    assert f"false-negative rate: 0.333 [{low:.3f}, {high:.3f}] (1/3)" in out
    assert "FP r2: gold '5'" in out and "FN r4: gold '5'" in out
    assert main(["--env", "math500", "--labels", str(labels), "--max-fp-rate", "0.4", "--max-fn-rate", "0.6"]) == 1
    assert "FAIL: false-positive rate 0.500 is above the threshold 0.4" in capsys.readouterr().out


def test_audit_lists_every_timeout(tmp_path, capsys):
    labels = write_labels(tmp_path / "labels.jsonl", [("\\boxed{9^{9^{9^{9^{9}}}}}", "1", False),
                                                      ("\\boxed{\\sqrt{50}}", "5\\sqrt{2}", True)])
    out_json = tmp_path / "graded.jsonl"
    assert main(["--env", "math500", "--labels", str(labels), "--timeout-s", "1", "--json", str(out_json)]) == 0
    # (the tower is labelled incorrect and a timeout is graded incorrect, so both rates stay 0)
    out = capsys.readouterr().out
    assert "timeouts (1):\n  r0: gold '1'" in out
    graded = [json.loads(line) for line in out_json.read_text().splitlines()]
    assert [g["timed_out"] for g in graded] == [True, False] and graded[1]["graded_correct"] is True


def test_bad_label_line_names_the_line(tmp_path, capsys):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"response": "x", "gold": "1", "is_correct": "yes"}) + "\n")
    with pytest.raises(SystemExit):
        main(["--env", "gsm8k", "--labels", str(labels)])
    assert "labels.jsonl:1: needs a string `response` and a boolean `is_correct`" in capsys.readouterr().err


def test_equivalent_forms_and_perturbations():
    assert equivalent_forms("\\frac{1}{2}") == ["1/2", "\\dfrac{1}{2}", "0.5"]
    assert equivalent_forms("-\\dfrac{3}{8}") == ["-3/8", "-\\dfrac{3}{8}", "-0.375"]
    assert equivalent_forms("\\frac{1}{3}") == ["1/3", "\\dfrac{1}{3}"]  # no finite decimal
    assert equivalent_forms("12345") == ["12345.0", "12,345"]
    assert equivalent_forms("0.25") == ["\\frac{1}{4}"]
    assert equivalent_forms("\\sqrt{2}") == []
    assert perturbed("\\frac{9}{2}") == "\\frac{0}{2}" and perturbed("(3, 4)") == "(4, 4)"
    assert perturbed("\\text{(B)}") is None
