"""Evaluation metrics: pass@k (unbiased), avg@k, greedy pass@1, each with a 95% interval, per env and per level.

Confidence intervals: every metric here is a mean over problems of a per-problem score in [0, 1]. We report the
Wilson score interval (Wilson 1927) with the number of problems as the sample size. For one binary outcome per
problem (greedy pass@1, or n=1) it is the usual Wilson interval; for averaged scores it is conservative, because a
[0, 1] variable with mean p has variance at most p(1-p), the Bernoulli variance Wilson assumes. Unlike the normal
interval it stays informative at 0% and 100%, which small models on hard tasks hit often.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

Z_95 = 1.959963984540054  # two-sided 95% standard normal quantile


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021, eq. 1).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomials.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def avg_at_k(correct: Sequence[bool]) -> float:
    """avg@k: the mean correctness of a problem's k samples (expected pass@1 estimated from k samples)."""
    if not correct:
        raise ValueError("avg@k needs at least one sample")
    return sum(bool(x) for x in correct) / len(correct)


def wilson_interval(mean: float, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n) (Wilson 1927)."""
    if n <= 0:
        raise ValueError(f"need at least one observation, got n={n}")
    if not 0.0 <= mean <= 1.0:
        raise ValueError(f"mean must lie in [0, 1], got {mean}")
    denominator = 1.0 + z * z / n
    centre = (mean + z * z / (2 * n)) / denominator
    half_width = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half_width), min(1.0, centre + half_width)


def mean_with_ci(per_problem: Sequence[float]) -> dict[str, float]:
    """{"mean", "ci_low", "ci_high"} of per-problem scores in [0, 1] (Wilson interval over problems)."""
    mean = sum(per_problem) / len(per_problem)
    mean = min(1.0, max(0.0, mean))  # float round-off
    low, high = wilson_interval(mean, len(per_problem))
    return {"mean": mean, "ci_low": low, "ci_high": high}


def default_ks(n_samples: int) -> list[int]:
    """1, 2, 4, ... up to n_samples, and n_samples itself."""
    ks, k = [], 1
    while k < n_samples:
        ks.append(k)
        k *= 2
    return ks + [n_samples]


def _record_field(record: Mapping | object, name: str, default: object = None) -> object:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def _group_metrics(
    outcomes: dict[str, list[bool]], greedy: dict[str, bool], ks: Sequence[int] | None
) -> dict:
    """Metrics for one group of problems: outcomes[problem_id] = sampled results, greedy[problem_id] = greedy result."""
    result: dict = {"n_problems": len(set(outcomes) | set(greedy))}
    if outcomes:
        n_min = min(len(samples) for samples in outcomes.values())
        n_max = max(len(samples) for samples in outcomes.values())
        result["n_samples_min"], result["n_samples_max"] = n_min, n_max
        wanted = default_ks(n_min) if ks is None else [k for k in ks if k <= n_min]
        pass_at = {}
        for k in wanted:
            pass_at[str(k)] = mean_with_ci([pass_at_k(len(s), sum(s), k) for s in outcomes.values()])
        result["pass_at_k"] = pass_at
        result["avg_at_k"] = {"k": n_min, **mean_with_ci([avg_at_k(s) for s in outcomes.values()])}
        one = pass_at["1"]
        result["pass_at_1"], result["pass_at_1_ci_low"], result["pass_at_1_ci_high"] = (
            one["mean"],
            one["ci_low"],
            one["ci_high"],
        )
        result["pass_at_1_ci"] = [one["ci_low"], one["ci_high"]]
        result["pass_at_1_source"] = "sampled"
    if greedy:
        stats = mean_with_ci([1.0 if correct else 0.0 for correct in greedy.values()])
        result["greedy_pass_at_1"] = stats["mean"]
        result["greedy_pass_at_1_ci_low"], result["greedy_pass_at_1_ci_high"] = (
            stats["ci_low"],
            stats["ci_high"],
        )
        if not outcomes:  # greedy-only evaluation: pass@1 is the greedy one (the keys callers rely on exist)
            result["pass_at_1"] = stats["mean"]
            result["pass_at_1_ci_low"], result["pass_at_1_ci_high"] = stats["ci_low"], stats["ci_high"]
            result["pass_at_1_ci"] = [stats["ci_low"], stats["ci_high"]]
            result["pass_at_1_source"] = "greedy"
    return result


def summarize_eval(records: Iterable[Mapping | object], ks: Sequence[int] | None = None) -> dict:
    """Aggregate per-(problem, sample) results into metrics, overall, per env and per (env, level).

    Each record has `problem_id`, `env`, `correct`, optionally `level` and `greedy` (True: a greedy-decoding
    result, reported as greedy_pass_at_1; sampled records feed pass@k and avg@k). ks defaults to 1, 2, 4, ... up
    to the smallest sample count per problem. Keys: n_problems, pass_at_1, pass_at_1_ci_low, pass_at_1_ci_high,
    pass_at_1_ci, pass_at_1_source ("sampled", or "greedy" when only greedy records were given), pass_at_k {k: {mean, ci_low, ci_high}}, avg_at_k, greedy_pass_at_1(+_ci_low/_high),
    by_env {env: {... , by_level {level: {...}}}}, by_level {level: {...}} (levels pooled over envs).
    """
    sampled: dict[tuple[str, str], list[bool]] = defaultdict(list)
    greedy: dict[tuple[str, str], bool] = {}
    levels: dict[tuple[str, str], str | None] = {}
    for record in records:
        env = str(_record_field(record, "env"))
        problem_id = _record_field(record, "problem_id")
        if problem_id is None:
            raise ValueError(f"eval record without problem_id: {record!r}")
        key = (env, str(problem_id))
        level = _record_field(record, "level")
        levels[key] = None if level is None else str(level)
        correct = bool(_record_field(record, "correct"))
        if _record_field(record, "greedy", False):
            greedy[key] = correct
        else:
            sampled[key].append(correct)
    if not sampled and not greedy:
        raise ValueError("summarize_eval got no records")

    def metrics_for(keys: set[tuple[str, str]]) -> dict:
        return _group_metrics(
            {f"{e}/{p}": sampled[(e, p)] for e, p in keys if (e, p) in sampled},
            {f"{e}/{p}": greedy[(e, p)] for e, p in keys if (e, p) in greedy},
            ks,
        )

    all_keys = set(sampled) | set(greedy)
    summary = metrics_for(all_keys)
    by_env = {}
    for env in sorted({env for env, _ in all_keys}):
        env_keys = {key for key in all_keys if key[0] == env}
        by_env[env] = metrics_for(env_keys)
        env_levels = sorted({levels[key] for key in env_keys if levels[key] is not None})
        if env_levels:
            by_env[env]["by_level"] = {
                level: metrics_for({key for key in env_keys if levels[key] == level}) for level in env_levels
            }
    summary["by_env"] = by_env
    all_levels = sorted({level for level in levels.values() if level is not None})
    summary["by_level"] = {
        level: metrics_for({key for key in all_keys if levels[key] == level}) for level in all_levels
    }
    return summary
