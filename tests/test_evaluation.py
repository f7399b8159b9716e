"""pass@k / avg@k estimators, Wilson intervals and the eval summary."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from marin_rl.runlog.eval_summary import avg_at_k, default_ks, pass_at_k, summarize_eval, wilson_interval


def test_pass_at_k_equals_the_combinatorial_definition():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_pass_at_k_is_the_chance_a_random_k_subset_contains_a_correct_sample():
    outcomes = [True, False, False, True, False, False, False]
    n, c = len(outcomes), sum(outcomes)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_is_stable_for_large_n():
    value = pass_at_k(2000, 3, 200)
    exact = 1 - Fraction(math.comb(1997, 200), math.comb(2000, 200))
    assert value == pytest.approx(float(exact), rel=1e-9)
    assert pass_at_k(10_000, 0, 50) == 0.0
    assert pass_at_k(10_000, 9_990, 11) == 1.0
    assert pass_at_k(100, 37, 1) == pytest.approx(0.37)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_avg_at_k():
    assert avg_at_k([True, False, True, True]) == 0.75
    with pytest.raises(ValueError):
        avg_at_k([])


def test_wilson_interval_known_values_and_edges():
    low, high = wilson_interval(0.5, 100)
    assert (low, high) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    low, high = wilson_interval(0.0, 20)
    assert low == 0.0 and 0.1 < high < 0.2  # informative at 0%, unlike the normal interval
    low, high = wilson_interval(1.0, 20)
    assert high == 1.0 and 0.8 < low < 0.9
    assert (
        wilson_interval(0.3, 1000)[1] - wilson_interval(0.3, 1000)[0]
        < wilson_interval(0.3, 100)[1] - (wilson_interval(0.3, 100)[0])
    )


def test_wilson_interval_covers_95_percent():
    rng = np.random.default_rng(0)
    p, n, trials = 0.3, 60, 4000
    hits = rng.binomial(n, p, size=trials)
    covered = sum(lo <= p <= hi for lo, hi in (wilson_interval(h / n, n) for h in hits))
    assert 0.93 <= covered / trials <= 0.975


def _records(table: dict[tuple[str, str, str | None], list[bool]]) -> list[dict]:
    return [
        {"env": env, "problem_id": problem, "level": level, "correct": correct}
        for (env, problem, level), outcomes in table.items()
        for correct in outcomes
    ]


def test_summarize_eval_overall_per_env_and_per_level():
    table = {
        ("math500", "p1", "1"): [True, True, False, False],
        ("math500", "p2", "1"): [False, False, False, False],
        ("math500", "p3", "5"): [True, False, False, False],
        ("gsm8k", "q1", None): [True, True, True, True],
        ("gsm8k", "q2", None): [False, True, False, False],
    }
    summary = summarize_eval(_records(table))
    per_problem = [sum(v) / 4 for v in table.values()]
    assert summary["n_problems"] == 5
    assert summary["pass_at_1"] == pytest.approx(np.mean(per_problem))
    assert summary["pass_at_1_ci"] == [summary["pass_at_1_ci_low"], summary["pass_at_1_ci_high"]]
    assert summary["pass_at_1_ci_low"] < summary["pass_at_1"] < summary["pass_at_1_ci_high"]
    assert summary["pass_at_1_source"] == "sampled"
    assert sorted(summary["pass_at_k"]) == ["1", "2", "4"]
    assert summary["pass_at_k"]["4"]["mean"] == pytest.approx(4 / 5)  # problems with any correct sample
    assert summary["pass_at_k"]["2"]["mean"] == pytest.approx(
        np.mean([pass_at_k(4, sum(v), 2) for v in table.values()])
    )
    assert summary["avg_at_k"]["k"] == 4 and summary["avg_at_k"]["mean"] == pytest.approx(
        summary["pass_at_1"]
    )
    assert summary["by_env"]["gsm8k"]["pass_at_1"] == pytest.approx((1.0 + 0.25) / 2)
    assert summary["by_env"]["math500"]["n_problems"] == 3
    assert summary["by_env"]["math500"]["by_level"]["1"]["pass_at_1"] == pytest.approx(0.25)
    assert summary["by_env"]["math500"]["by_level"]["5"]["n_problems"] == 1
    assert "by_level" not in summary["by_env"]["gsm8k"]
    assert sorted(summary["by_level"]) == ["1", "5"]
    assert json.loads(json.dumps(summary)) == summary  # stored as-is in summary.json


def test_summarize_eval_greedy_records_and_explicit_ks():
    records = _records({("mock", "a", None): [True, False], ("mock", "b", None): [False, False]})
    records += [
        {"env": "mock", "problem_id": "a", "correct": True, "greedy": True},
        {"env": "mock", "problem_id": "b", "correct": True, "greedy": True},
    ]
    summary = summarize_eval(records, ks=[1, 2, 8])
    assert summary["greedy_pass_at_1"] == 1.0
    assert summary["pass_at_1"] == pytest.approx(0.25)
    assert sorted(summary["pass_at_k"]) == ["1", "2"]  # k=8 needs 8 samples per problem
    greedy_only = summarize_eval([r for r in records if r.get("greedy")])
    assert greedy_only["pass_at_1"] == 1.0 and greedy_only["pass_at_1_source"] == "greedy"
    assert greedy_only["pass_at_1_ci_low"] < 1.0


def test_summarize_eval_errors():
    with pytest.raises(ValueError, match="no records"):
        summarize_eval([])
    with pytest.raises(ValueError, match="problem_id"):
        summarize_eval([{"env": "x", "correct": True}])


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(6) == [1, 2, 4, 6]
