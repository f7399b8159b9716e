"""Small statistics for comparing runs across seeds: mean and Student-t confidence interval.

Plain Python (no numpy/pandas) so the sweep report stays light; the t quantile comes from scipy (a
dependency of jax, always installed with marin-rl).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.special import stdtrit  # Student t inverse CDF; scipy.stats costs >1 s to import


@dataclass(frozen=True)
class MeanCI:
    """Mean of `n` values with a two-sided confidence interval; ci_low/ci_high are NaN when n < 2."""

    mean: float
    ci_low: float
    ci_high: float
    n: int
    std: float  # sample standard deviation (ddof=1); NaN when n < 2

    @property
    def has_ci(self) -> bool:
        return self.n >= 2 and not math.isnan(self.ci_low)


def t_quantile(probability: float, dof: int) -> float:
    """Quantile of Student's t with `dof` degrees of freedom: t_{p, dof} = F^{-1}(p) (e.g. t_{0.975,1} = 12.706)."""
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof}")
    return float(stdtrit(dof, probability))


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation s = sqrt(sum (x - mean)^2 / (n - 1)); NaN for n < 2."""
    n = len(values)
    if n < 2:
        return math.nan
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1))


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> MeanCI:
    """Mean +- t_{(1+c)/2, n-1} * s / sqrt(n): the Student-t CI for the mean over seeds (Student 1908)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(finite)
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0, math.nan)
    mean = math.fsum(finite) / n
    if n == 1:
        return MeanCI(mean, math.nan, math.nan, 1, math.nan)
    std = sample_std(finite)
    half_width = t_quantile((1.0 + confidence) / 2.0, n - 1) * std / math.sqrt(n)
    return MeanCI(mean, mean - half_width, mean + half_width, n, std)
