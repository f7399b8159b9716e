"""Paired comparisons across seeds: two configurations run with the same seeds differ by a per-seed difference.

Pairing removes what a seed does to both configurations alike (initialisation, data order, eval sampling), so the
interval of the mean difference is usually much narrower than the two unpaired intervals suggest. Pure functions
on plain floats; the bootstrap draws from a numpy Generator seeded by the caller (never the clock).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr  # Student t CDF; scipy.stats costs >1 s to import

from marin_rl.runlog.stats import sample_std, t_quantile

DEFAULT_BOOTSTRAP_RESAMPLES = 10_000
DEFAULT_BOOTSTRAP_SEED = 0
DEFAULT_POWER = 0.8  # probability of detecting a true difference of the stated size
MAX_SEEDS_SEARCHED = 100_000  # seeds_needed gives up (returns None) beyond this


@dataclass(frozen=True)
class Pairing:
    """Per-seed differences other - baseline over the seeds both have; seeds only one side has are listed."""

    seeds: list[str]
    differences: list[float]
    only_baseline: list[str]
    only_other: list[str]


@dataclass(frozen=True)
class PairedT:
    """Mean difference with its paired-t interval and two-sided p-value (H0: mean difference 0)."""

    mean: float
    ci_low: float
    ci_high: float
    std: float  # sample standard deviation of the differences (ddof=1)
    n: int
    p_value: float


def pair_by_seed(baseline: Mapping[str, float], other: Mapping[str, float]) -> Pairing:
    """d_s = other[s] - baseline[s] for every seed s in both maps (sorted by seed); the rest listed, not dropped."""
    shared = sorted(set(baseline) & set(other), key=_seed_order)
    return Pairing(
        seeds=shared,
        differences=[float(other[s]) - float(baseline[s]) for s in shared],
        only_baseline=sorted(set(baseline) - set(other), key=_seed_order),
        only_other=sorted(set(other) - set(baseline), key=_seed_order),
    )


def _seed_order(seed: str) -> tuple[int, float, str]:
    try:
        return (0, float(seed), "")
    except ValueError:
        return (1, 0.0, seed)


def t_two_sided_p(t_statistic: float, dof: int) -> float:
    """Two-sided p-value of a t statistic: 2 * F_dof(-|t|)."""
    return float(2.0 * stdtr(dof, -abs(t_statistic)))


def paired_t(differences: Sequence[float], confidence: float = 0.95) -> PairedT:
    """mean(d) +- t_{(1+c)/2, n-1} * s_d / sqrt(n), p = 2 F_{n-1}(-|mean(d) / (s_d / sqrt(n))|) (paired t-test).

    Needs n >= 2 for an interval (NaN otherwise). When all differences are equal (s_d = 0) the interval is the
    point and p is 0 for a non-zero difference, 1 for none.
    """
    n = len(differences)
    if n == 0:
        return PairedT(math.nan, math.nan, math.nan, math.nan, 0, math.nan)
    mean = math.fsum(differences) / n
    if n == 1:
        return PairedT(mean, math.nan, math.nan, math.nan, 1, math.nan)
    std = sample_std(differences)
    # s_d = 0: all differences equal (the formula can leave ~1e-17 of round-off) or so close that s_d underflows
    if max(differences) == min(differences) or std == 0.0:
        return PairedT(mean, mean, mean, 0.0, n, 0.0 if mean != 0.0 else 1.0)
    standard_error = std / math.sqrt(n)
    half_width = t_quantile((1.0 + confidence) / 2.0, n - 1) * standard_error
    return PairedT(mean, mean - half_width, mean + half_width, std, n,
                   t_two_sided_p(mean / standard_error, n - 1))


def paired_bootstrap(
    differences: Sequence[float],
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(d): resample the n seed differences with replacement (Efron 1979).

    Resampling whole seeds keeps each pair together. With few seeds there are only n^n distinct resamples, so the
    interval is coarse (and, unlike the t interval, never wider than the range of the differences).
    """
    n = len(differences)
    if n < 2:
        return math.nan, math.nan
    differences_n = np.asarray(differences, dtype=np.float64)
    rng = np.random.default_rng(seed)
    indices_rn = rng.integers(0, n, size=(n_resamples, n))
    means_r = differences_n[indices_rn].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means_r, [tail, 1.0 - tail])
    return float(low), float(high)


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm (1979) step-down adjusted p-values: p~_(i) = max_{j<=i} min(1, (m - j + 1) p_(j)), in the input order.

    NaN p-values (comparisons without an interval) are left NaN and do not count towards m.
    """
    present = [(p, i) for i, p in enumerate(p_values) if not math.isnan(p)]
    present.sort()
    m = len(present)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted


def _detectable_factor(n: int, alpha: float, power: float) -> float:
    """(t_{1-alpha/2, n-1} + t_{power, n-1}) / sqrt(n): the detectable difference per unit of s_d."""
    dof = n - 1
    return (t_quantile(1.0 - alpha / 2.0, dof) + t_quantile(power, dof)) / math.sqrt(n)


def min_detectable_difference(std: float, n: int, alpha: float = 0.05, power: float = DEFAULT_POWER) -> float:
    """Smallest true mean difference a two-sided paired t-test at level alpha detects with the given power at n
    seeds: (t_{1-alpha/2, n-1} + t_{power, n-1}) * s_d / sqrt(n) (the usual t approximation of the power)."""
    if n < 2 or math.isnan(std):
        return math.nan
    return _detectable_factor(n, alpha, power) * std


def seeds_needed(std: float, difference: float, alpha: float = 0.05, power: float = DEFAULT_POWER) -> int | None:
    """Fewest seeds n >= 2 whose min_detectable_difference(std, n) <= |difference|; None when std is unknown
    (NaN) or more than MAX_SEEDS_SEARCHED would be needed."""
    if math.isnan(std) or difference == 0.0:
        return None
    if std == 0.0:
        return 2
    target = abs(difference) / std
    low, high = 2, 2
    while _detectable_factor(high, alpha, power) > target:  # doubling until enough seeds, then bisect
        low, high = high + 1, high * 2
        if low > MAX_SEEDS_SEARCHED:
            return None
    while low < high:  # smallest n in [low, high] that is enough (the factor decreases with n)
        middle = (low + high) // 2
        if _detectable_factor(middle, alpha, power) <= target:
            high = middle
        else:
            low = middle + 1
    return high
