"""The paired section of the sweep report: every configuration against a baseline, seed by seed.

For each other configuration and metric: the per-seed differences (other - baseline) over the seeds both ran,
their mean with a paired-t and a paired-bootstrap interval, a Holm-corrected p-value over all comparisons shown,
and the power line (minimum detectable difference at the seeds run; seeds needed for a stated difference).
Beside it, evaluation noise (the Wilson interval of one eval over its n problems) against seed noise (the
t interval over seeds), so a reader sees which dominates. Works on the report's groups through a `value_of`
callable, so it does not import the report module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from marin_rl.runlog.eval_summary import wilson_interval
from marin_rl.runlog.paired import (
    DEFAULT_BOOTSTRAP_SEED,
    DEFAULT_POWER,
    PairedT,
    Pairing,
    holm_adjust,
    min_detectable_difference,
    pair_by_seed,
    paired_bootstrap,
    paired_t,
    seeds_needed,
)
from marin_rl.runlog.stats import mean_ci

ALPHA = 0.05  # level of the Holm-corrected tests and of the power line

ValueOf = Callable[[Any, str], "float | None"]  # (run record, metric name) -> value


@dataclass(frozen=True)
class Comparison:
    other: str  # label of the configuration compared with the baseline
    metric: str
    header: str
    pairing: Pairing
    t: PairedT
    bootstrap_low: float
    bootstrap_high: float
    min_detectable: float  # at the seeds paired, alpha=ALPHA, power=DEFAULT_POWER
    seeds_for_detect: int | None  # seeds needed to detect `detect`; None without --detect or without a s_d
    p_holm: float = math.nan


@dataclass(frozen=True)
class NoiseRow:
    """Evaluation noise vs seed noise of one eval pass@1 metric in one configuration."""

    config: str
    metric: str
    n_problems: int | None  # problems per eval (None: the summaries do not say)
    eval_half_width: float  # mean over seeds of the Wilson 95% half-width of one eval
    eval_std: float  # mean over seeds of sqrt(p (1 - p) / n): the binomial sd of one eval
    seed_half_width: float  # half-width of the t interval of the mean over seeds
    seed_std: float  # sd of the metric across seeds (contains the eval noise)

    @property
    def dominant(self) -> str:
        """"eval" when the binomial variance explains at least half the variance across seeds, else "seed"."""
        if math.isnan(self.eval_std) or math.isnan(self.seed_std):
            return "-"
        return "eval" if 2.0 * self.eval_std**2 >= self.seed_std**2 else "seed"


@dataclass
class PairedSection:
    baseline: str  # label of the baseline configuration
    confidence: float
    detect: float | None
    comparisons: list[Comparison]
    noise: list[NoiseRow]
    notes: list[str] = field(default_factory=list)  # unpaired seeds, repeated seeds


def parse_baseline(spec: str) -> dict[str, str]:
    """"loss=dapo_global optimizer.lr=1e-4" -> {"loss": "dapo_global", "optimizer.lr": "1e-4"}."""
    pairs = {}
    for token in spec.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ValueError(f"--baseline: expected KEY=VALUE pairs separated by spaces, got {token!r}")
        pairs[key] = value
    if not pairs:
        raise ValueError("--baseline is empty; give KEY=VALUE pairs, e.g. --baseline loss=dapo_global")
    return pairs


def select_baseline(groups: Sequence[Any], spec: str | None) -> int:
    """Index of the group whose swept settings match every KEY=VALUE of `spec`; 0 (the first) when spec is None."""
    if spec is None:
        return 0
    wanted = parse_baseline(spec)
    swept = set(groups[0].settings) if groups else set()
    unknown = sorted(set(wanted) - swept)
    if unknown:
        raise ValueError(f"--baseline: {unknown} not swept in these runs; swept keys: {sorted(swept) or 'none'}")
    matches = [i for i, g in enumerate(groups) if all(g.settings.get(k) == v for k, v in wanted.items())]
    if len(matches) != 1:
        labels = "; ".join(g.label for g in groups)
        found = "no configuration" if not matches else f"{len(matches)} configurations"
        raise ValueError(f"--baseline {spec!r} matches {found}; it must pick one of: {labels}")
    return matches[0]


def seed_values(group: Any, metric: str, value_of: ValueOf) -> tuple[dict[str, float], list[str]]:
    """seed -> value over the group's completed runs (repeated seeds averaged, with a note)."""
    by_seed: dict[str, list[float]] = {}
    for run in group.completed_runs:
        value = value_of(run, metric)
        if value is not None:
            by_seed.setdefault(run.seed if run.seed is not None else "?", []).append(value)
    notes = [f"{group.label}: seed {seed} has {len(v)} completed runs; their mean is paired"
             for seed, v in by_seed.items() if len(v) > 1]
    return {seed: math.fsum(v) / len(v) for seed, v in by_seed.items()}, notes


def compare(
    baseline: Any,
    other: Any,
    metric: Any,
    value_of: ValueOf,
    confidence: float,
    detect: float | None,
    bootstrap_seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> tuple[Comparison, list[str]]:
    """One (configuration, metric) comparison against the baseline, and notes on unpaired or repeated seeds."""
    base_values, notes = seed_values(baseline, metric.name, value_of)
    other_values, other_notes = seed_values(other, metric.name, value_of)
    pairing = pair_by_seed(base_values, other_values)
    for side, seeds in ((baseline.label, pairing.only_baseline), (other.label, pairing.only_other)):
        if seeds:
            notes.append(f"{other.label} vs baseline: seed(s) {', '.join(seeds)} only in {side}; not paired")
    t = paired_t(pairing.differences, confidence)
    low, high = paired_bootstrap(pairing.differences, confidence, seed=bootstrap_seed)
    comparison = Comparison(
        other=other.label, metric=metric.name, header=metric.header, pairing=pairing, t=t,
        bootstrap_low=low, bootstrap_high=high,
        min_detectable=min_detectable_difference(t.std, t.n, ALPHA, DEFAULT_POWER),
        seeds_for_detect=None if detect is None else seeds_needed(t.std, detect, ALPHA, DEFAULT_POWER),
    )
    return comparison, notes + other_notes


def noise_row(group: Any, metric: str, value_of: ValueOf, confidence: float) -> NoiseRow | None:
    """Eval (binomial) vs seed noise for a "<block>.pass_at_1" metric whose summary block gives n_problems."""
    block_name, _, leaf = metric.rpartition(".")
    if leaf != "pass_at_1" or not block_name:
        return None
    half_widths, stds, sizes = [], [], set()
    for run in group.completed_runs:
        block = run.summary.get(block_name)
        if not isinstance(block, dict) or not isinstance(block.get("n_problems"), int | float):
            continue
        p, n = value_of(run, metric), int(block["n_problems"])
        if p is None or n <= 0 or not 0.0 <= p <= 1.0:
            continue
        low, high = wilson_interval(p, n)
        half_widths.append((high - low) / 2.0)
        stds.append(math.sqrt(p * (1.0 - p) / n))
        sizes.add(n)
    if not half_widths:
        return None
    seeds = mean_ci([v for v in seed_values(group, metric, value_of)[0].values()], confidence)
    return NoiseRow(
        config=group.label, metric=metric, n_problems=sizes.pop() if len(sizes) == 1 else None,
        eval_half_width=math.fsum(half_widths) / len(half_widths), eval_std=math.fsum(stds) / len(stds),
        seed_half_width=(seeds.ci_high - seeds.ci_low) / 2.0 if seeds.has_ci else math.nan,
        seed_std=seeds.std,
    )


def build_paired_section(
    groups: Sequence[Any],
    metrics: Sequence[Any],
    value_of: ValueOf,
    *,
    baseline: str | None = None,
    confidence: float = 0.95,
    detect: float | None = None,
    bootstrap_seed: int = DEFAULT_BOOTSTRAP_SEED,
) -> PairedSection | None:
    """All comparisons against the baseline (Holm over every one with a p-value); None with a single group."""
    if len(groups) < 2:
        return None
    base_index = select_baseline(groups, baseline)
    base = groups[base_index]
    comparisons: list[Comparison] = []
    by_note: dict[str, list[str]] = {}
    for index, other in enumerate(groups):
        if index == base_index:
            continue
        for metric in metrics:
            comparison, comparison_notes = compare(base, other, metric, value_of, confidence, detect, bootstrap_seed)
            comparisons.append(comparison)
            for note in comparison_notes:  # the same seeds are usually unpaired in every metric: say it once
                by_note.setdefault(note, []).append(metric.name)
    notes = [note if len(names) == len(metrics) else f"{note} ({', '.join(names)})"
             for note, names in by_note.items()]
    adjusted = holm_adjust([c.t.p_value for c in comparisons])
    comparisons = [replace(c, p_holm=p) for c, p in zip(comparisons, adjusted, strict=True)]
    noise = [row for group in groups for metric in metrics
             if (row := noise_row(group, metric.name, value_of, confidence)) is not None]
    return PairedSection(base.label, confidence, detect, comparisons, noise, notes)


# -------------------------------------------------------------------------------------------- formatting
def _num(value: float | None, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _interval(low: float, high: float) -> str:
    return "-" if math.isnan(low) else f"[{_num(low, True)}, {_num(high, True)}]"


def _p(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"


def comparison_table(section: PairedSection) -> tuple[list[str], list[list[str]]]:
    percent = f"{section.confidence * 100:g}%"
    headers = ["config", "metric", "paired seeds", "mean diff", f"paired t {percent}", f"bootstrap {percent}",
               "p (Holm)", "min detectable"]
    if section.detect is not None:
        headers.append(f"seeds for {section.detect:g}")
    rows = []
    for c in section.comparisons:
        row = [c.other, c.header, str(c.t.n), _num(c.t.mean, True), _interval(c.t.ci_low, c.t.ci_high),
               _interval(c.bootstrap_low, c.bootstrap_high), _p(c.p_holm), _num(c.min_detectable)]
        if section.detect is not None:
            row.append("-" if c.seeds_for_detect is None else str(c.seeds_for_detect))
        rows.append(row)
    return headers, rows


def noise_table(section: PairedSection) -> tuple[list[str], list[list[str]]]:
    headers = ["config", "metric", "problems", "eval 95% half-width (Wilson)", "seed half-width (t)",
               "eval sd", "seed sd", "dominant"]
    rows = [[r.config, r.metric, "-" if r.n_problems is None else str(r.n_problems), _num(r.eval_half_width),
             _num(r.seed_half_width), _num(r.eval_std), _num(r.seed_std), r.dominant] for r in section.noise]
    return headers, rows


def section_intro(section: PairedSection) -> list[str]:
    """The sentences above the paired table in report.md."""
    power = f"{DEFAULT_POWER:.0%}"
    lines = [
        f"Baseline: **{section.baseline}**. Each row: per-seed difference (config - baseline) over the seeds both "
        "completed, its mean, the paired-t interval and a percentile bootstrap interval (10,000 resamples of "
        f"the seeds, generator seed {DEFAULT_BOOTSTRAP_SEED}). p: two-sided paired t-test, Holm-corrected over "
        f"all {sum(not math.isnan(c.t.p_value) for c in section.comparisons)} comparisons in this table. "
        f"min detectable: the true difference a level-{ALPHA:g} paired t-test finds with {power} power at the "
        "seeds paired, from the observed sd of the differences.",
    ]
    if section.detect is not None:
        lines.append(f"seeds for {section.detect:g}: seeds needed to detect a difference of {section.detect:g} "
                     f"with the same test and power, given the observed sd.")
    return lines
