"""Sweep report: `python -m marin_rl.runlog.report DIR [DIR ...]` -> report.md, report.csv and learning-curve PNGs.

Run folders (see `marin_rl.runlog.reader`) are grouped into configurations: runs whose Hydra overrides are equal
once `seed` (and bookkeeping keys such as dry_run, run_name, hydra.*) are removed. When any run lacks
`.hydra/overrides.yaml`, the flattened composed configs are compared instead. Each configuration gets one row:
the swept values, the number of completed seeds, and for each final metric the mean with a Student-t 95% CI
over seeds, plus mean steps and wall time. With several configurations, report.md and the console also compare
each with a baseline seed by seed (`marin_rl.runlog.paired_report`). Failed and unfinished runs are listed in their own section, never
dropped. `build_report` does the same from Python and returns plain dataclasses / dicts (no pandas).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from marin_rl.runlog.paired_report import (
    PairedSection,
    build_paired_section,
    comparison_table,
    noise_table,
    section_intro,
)
from marin_rl.runlog.plots import SeedCurves, plot_seed_curves
from marin_rl.runlog.reader import (
    RunRecord,
    as_number,
    find_run_dirs,
    load_run,
    lookup,
)
from marin_rl.runlog.stats import MeanCI, mean_ci

REPORT_MD = "report.md"
REPORT_CSV = "report.csv"
REWARD_PNG = "reward_curves.png"
PASS_AT_1_PNG = "pass_at_1_curves.png"

REWARD_KEY = "reward/mean"  # metrics.jsonl key plotted in reward_curves.png
PASS_AT_1_KEY = "eval/pass_at_1"  # metrics.jsonl key plotted in pass_at_1_curves.png

# Keys that never make two runs different configurations: the seed is what we average over, the rest is
# bookkeeping. A key also covers its children ("hydra" covers "hydra.run.dir" and "hydra/launcher").
DEFAULT_IGNORED_KEYS = ("seed", "dry_run", "run_name", "resume", "hydra")
NOT_SET = "(not set)"  # a swept key that one configuration does not set
DEFAULT_CONFIDENCE = 0.95

PASS_BEFORE = "eval_before_rl.pass_at_1"
PASS_AFTER = "eval_after_rl.pass_at_1"
PASS_GAIN = "pass_at_1_gain"
FINAL_REWARD = "final.reward/mean"
TOKENS_PER_SECOND = "tokens_per_second"


@dataclass(frozen=True)
class Metric:
    """A per-run final number; `name` is a dotted path into summary.json unless it is derived (the gain)."""

    name: str
    header: str
    description: str


DEFAULT_METRICS = (
    Metric(PASS_BEFORE, "pass@1 before", "eval pass@1 before RL (summary.json eval_before_rl.pass_at_1)"),
    Metric(PASS_AFTER, "pass@1 after", "eval pass@1 after RL (summary.json eval_after_rl.pass_at_1)"),
    Metric(PASS_GAIN, "pass@1 gain", "after - before, computed per seed, then averaged"),
    Metric(FINAL_REWARD, "final reward", "summary.json final['reward/mean'], else the last reward/mean logged"),
    Metric(TOKENS_PER_SECOND, "tokens/s", "summary.json tokens_per_second"),
)


def metric_value(run: RunRecord, metric: str) -> float | None:
    """One run's value of a final metric, or None when the run did not record it."""
    if metric == PASS_GAIN:
        before, after = metric_value(run, PASS_BEFORE), metric_value(run, PASS_AFTER)
        return None if before is None or after is None else after - before
    value = as_number(lookup(run.summary, metric))
    if value is None and metric == FINAL_REWARD:
        value = run.last_logged(REWARD_KEY)
    return value


@dataclass
class ConfigGroup:
    """One configuration: its swept values and all its runs (completed ones feed the statistics)."""

    label: str
    settings: dict[str, str]  # swept key -> value
    runs: list[RunRecord]
    stats: dict[str, MeanCI] = field(default_factory=dict)
    steps_mean: float = math.nan
    wall_seconds_mean: float = math.nan

    @property
    def completed_runs(self) -> list[RunRecord]:
        return [run for run in self.runs if run.completed]

    @property
    def incomplete_runs(self) -> list[RunRecord]:
        return [run for run in self.runs if not run.completed]

    @property
    def seeds(self) -> list[str]:
        return [run.seed if run.seed is not None else "?" for run in self.completed_runs]


@dataclass
class Report:
    """What `build_report` found and wrote. `rows`/`columns` are exactly report.csv (NaN where empty)."""

    grouping: str  # "overrides" or "config"
    ignored_keys: list[str]  # keys (and their children) that do not distinguish configurations
    swept_keys: list[str]
    fixed_settings: dict[str, str]  # keys with one value across all configurations
    groups: list[ConfigGroup]
    runs: list[RunRecord]
    metrics: list[Metric]
    confidence: float
    columns: list[str]
    rows: list[dict[str, str | int | float]]
    notes: list[str]  # about configurations; notes about single runs stay on `RunRecord.notes`
    files: dict[str, Path] = field(default_factory=dict)
    paired: PairedSection | None = None  # every configuration against the baseline; None with one configuration

    @property
    def incomplete_runs(self) -> list[RunRecord]:
        return [run for run in self.runs if not run.completed]


def _is_ignored(key: str, ignored: Sequence[str]) -> bool:
    return any(key == name or key.startswith((f"{name}.", f"{name}/")) for name in ignored)


def _sort_value(value: str) -> tuple[int, float, str]:
    # Numbers in numeric order, then text; "(not set)" first.
    if value == NOT_SET:
        return (0, 0.0, "")
    try:
        return (1, float(value), "")
    except ValueError:
        return (2, 0.0, value)


def _mean(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else math.nan


def group_runs(
    runs: Sequence[RunRecord], ignored: Sequence[str] = DEFAULT_IGNORED_KEYS
) -> tuple[str, list[str], dict[str, str], list[ConfigGroup]]:
    """(grouping mode, swept keys, fixed settings, groups): runs equal up to the ignored keys share a group."""
    use_overrides = all(run.overrides is not None for run in runs)
    identities = [
        {k: v for k, v in ((run.overrides or {}) if use_overrides else run.config).items() if not _is_ignored(k, ignored)}
        for run in runs
    ]
    by_identity: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for index, identity in enumerate(identities):
        by_identity.setdefault(tuple(sorted(identity.items())), []).append(index)

    all_keys = list(dict.fromkeys(key for identity in identities for key in identity))
    group_identities = [dict(key) for key in by_identity]
    swept = [k for k in all_keys if len({identity.get(k, NOT_SET) for identity in group_identities}) > 1]
    fixed = {k: group_identities[0][k] for k in all_keys if k not in swept}

    groups = []
    for identity, members in zip(group_identities, by_identity.values(), strict=True):
        settings = {k: identity.get(k, NOT_SET) for k in swept}
        label = " ".join(f"{k}={v}" for k, v in settings.items()) or "(single configuration)"
        groups.append(ConfigGroup(label=label, settings=settings, runs=[runs[i] for i in members]))
    groups.sort(key=lambda g: [_sort_value(g.settings[k]) for k in swept])
    return ("overrides" if use_overrides else "config"), swept, fixed, groups


def _summarize_group(group: ConfigGroup, metrics: Sequence[Metric], confidence: float) -> list[str]:
    """Fill the group's statistics; return notes about gaps (a metric missing in some seeds, repeated seeds)."""
    notes = []
    completed = group.completed_runs
    for metric in metrics:
        values = [metric_value(run, metric.name) for run in completed]
        present = [v for v in values if v is not None]
        group.stats[metric.name] = mean_ci(present, confidence)
        if present and len(present) < len(values):
            notes.append(f"{group.label}: {metric.name} missing in {len(values) - len(present)} of "
                         f"{len(values)} completed runs; statistics use the other {len(present)}")
    group.steps_mean = _mean([run.steps for run in completed])
    group.wall_seconds_mean = _mean([run.wall_seconds for run in completed])
    seeds = group.seeds
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        notes.append(f"{group.label}: seed(s) {', '.join(repeated)} appear in more than one completed run; "
                     "each run is counted")
    return notes


def _rows(report_groups: Sequence[ConfigGroup], swept: Sequence[str], metrics: Sequence[Metric]):
    columns = ["config", *swept, "n_seeds", "seeds", "n_incomplete"]
    for metric in metrics:
        columns += [f"{metric.name}_mean", f"{metric.name}_ci_low", f"{metric.name}_ci_high"]
    columns += ["steps_mean", "wall_seconds_mean"]
    rows = []
    for group in report_groups:
        row: dict[str, str | int | float] = {"config": group.label, **group.settings}
        row.update(n_seeds=len(group.completed_runs), seeds=";".join(group.seeds),
                   n_incomplete=len(group.incomplete_runs))
        for metric in metrics:
            stat = group.stats[metric.name]
            row.update({f"{metric.name}_mean": stat.mean, f"{metric.name}_ci_low": stat.ci_low,
                        f"{metric.name}_ci_high": stat.ci_high})
        row.update(steps_mean=group.steps_mean, wall_seconds_mean=group.wall_seconds_mean)
        rows.append(row)
    return columns, rows


def summarize(
    runs: Sequence[RunRecord],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    ignore: Sequence[str] = (),
    extra_metrics: Sequence[str] = (),
    baseline: str | None = None,
    detect: float | None = None,
) -> Report:
    """Group loaded runs and compute per-configuration statistics (writes nothing)."""
    if not runs:
        raise ValueError("no runs to report on")
    metrics = list(DEFAULT_METRICS) + [
        Metric(name, name, f"summary.json {name}") for name in extra_metrics
        if name not in {m.name for m in DEFAULT_METRICS}
    ]
    ignored = list(dict.fromkeys((*DEFAULT_IGNORED_KEYS, *ignore)))
    grouping, swept, fixed, groups = group_runs(runs, ignored)
    notes: list[str] = []
    for group in groups:
        notes += _summarize_group(group, metrics, confidence)
    columns, rows = _rows(groups, swept, metrics)
    paired = build_paired_section(groups, metrics, metric_value, baseline=baseline, confidence=confidence,
                                  detect=detect)
    return Report(grouping=grouping, ignored_keys=ignored, swept_keys=swept, fixed_settings=fixed, groups=groups, runs=list(runs),
                  metrics=metrics, confidence=confidence, columns=columns, rows=rows, notes=notes, paired=paired)


# ---------------------------------------------------------------------------------------------- formatting


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def _amount(value: float | None) -> str:
    """Steps and seconds: whole numbers without decimals."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:.1f}"


def format_stat(stat: MeanCI, n_seeds: int) -> str:
    """"0.500 [0.373, 0.627]"; "0.500 (n=1)" for one seed; "(n=k)" appended when fewer seeds had the metric."""
    if stat.n == 0:
        return "-"
    text = _number(stat.mean)
    if stat.has_ci:
        text += f" [{_number(stat.ci_low)}, {_number(stat.ci_high)}]"
    if stat.n == 1 or stat.n != n_seeds:
        text += f" (n={stat.n})"
    return text


def _display_table(report: Report) -> tuple[list[str], list[list[str]]]:
    headers = ["config", "seeds", *[m.header for m in report.metrics], "steps", "wall s"]
    table = []
    for group in report.groups:
        n_seeds = len(group.completed_runs)
        seeds = str(n_seeds) + (f" (+{len(group.incomplete_runs)} incomplete)" if group.incomplete_runs else "")
        table.append([group.label, seeds, *[format_stat(group.stats[m.name], n_seeds) for m in report.metrics],
                      _amount(group.steps_mean), _amount(group.wall_seconds_mean)])
    return headers, table


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], table: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table]
    return lines


def text_table(headers: Sequence[str], table: Sequence[Sequence[str]]) -> str:
    """A fixed-width table for the console."""
    widths = [max(len(str(row[i])) for row in [headers, *table]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(line.rstrip() for line in lines)


def _shown_path(path: Path, out_dir: Path) -> str:
    relative = os.path.relpath(path.resolve(), out_dir.resolve())
    return str(path.resolve()) if relative.startswith("..") else relative


def _incomplete_table(report: Report, out_dir: Path) -> tuple[list[str], list[list[str]]]:
    headers = ["run", "status", "seed", "overrides", "last step", "reason"]
    table = [[_shown_path(run.path, out_dir), run.status, run.seed or "?",
              " ".join(run.override_lines) or "-", "-" if run.last_step is None else str(run.last_step),
              run.reason or "-"] for run in report.incomplete_runs]
    return headers, table


def render_markdown(report: Report, out_dir: Path) -> str:
    completed = sum(run.completed for run in report.runs)
    percent = f"{report.confidence * 100:g}%"
    grouping = ("their Hydra overrides" if report.grouping == "overrides"
                else "their composed configs (some runs have no .hydra/overrides.yaml)")
    lines = [
        "# Sweep report",
        "",
        f"{len(report.runs)} run folders: {completed} completed, {len(report.runs) - completed} failed or "
        f"unfinished; {len(report.groups)} configurations.",
        f"Runs are grouped by {grouping}, ignoring {', '.join(report.ignored_keys)}.",
    ]
    if report.fixed_settings:
        lines.append("Same in every configuration: "
                     + ", ".join(f"`{k}={v}`" for k, v in report.fixed_settings.items()) + ".")
    lines += [
        "",
        "## Results",
        "",
        f"Each cell: mean [{percent} CI] over completed seeds (Student t with n-1 degrees of freedom). "
        '"n=1": a single seed, so no CI. With few seeds the interval is wide and, for a pass rate, may reach '
        "past 0 or 1: it is the plain t-interval, not clipped. report.csv has the same numbers at full precision.",
        "",
        *_md_table(*_display_table(report)),
        "",
        *[f"- **{m.header}**: {m.description}" for m in report.metrics],
        "",
        *_paired_markdown(report.paired),
        "## Plots",
        "",
    ]
    for key, name in (("reward_png", REWARD_PNG), ("pass_at_1_png", PASS_AT_1_PNG)):
        if key in report.files:
            lines.append(f"![{name}]({name})")
            lines.append("")
    if not report.files.get("reward_png"):
        lines += ["(plots were not written)", ""]
    lines += [f"## Failed or unfinished runs ({len(report.incomplete_runs)})", ""]
    if report.incomplete_runs:
        lines += [*_md_table(*_incomplete_table(report, out_dir)), ""]
    else:
        lines += ["None.", ""]
    notes = report.notes + [f"{_shown_path(run.path, out_dir)}: {note}" for run in report.runs for note in run.notes]
    if notes:
        lines += ["## Notes", "", *[f"- {_md_cell(note)}" for note in notes], ""]
    return "\n".join(lines)


def _paired_markdown(paired: PairedSection | None) -> list[str]:
    if paired is None:
        return []
    lines = ["## Paired comparisons", "", *section_intro(paired), "", *_md_table(*comparison_table(paired)), ""]
    lines += [f"- {_md_cell(note)}" for note in paired.notes] + ([""] if paired.notes else [])
    if paired.noise:
        lines += ["### Evaluation noise vs seed noise", "",
                  "eval: the Wilson 95% interval of one evaluation over its n problems (mean over seeds); seed: "
                  "the t interval of the mean over seeds. \"dominant\" is eval when the binomial variance "
                  "p(1-p)/n is at least half the variance across seeds.", "",
                  *_md_table(*noise_table(paired)), ""]
    return lines


def _csv_value(value: str | int | float) -> str | int | float:
    return "" if isinstance(value, float) and math.isnan(value) else value


def write_csv(report: Report, path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=report.columns)
        writer.writeheader()
        for row in report.rows:
            writer.writerow({k: _csv_value(row.get(k, math.nan)) for k in report.columns})
    return path


def write_plots(report: Report, out_dir: Path) -> dict[str, Path]:
    reward = [SeedCurves(g.label, [run.curve(REWARD_KEY) for run in g.completed_runs]) for g in report.groups]
    pass_at_1 = []
    for group in report.groups:
        before, after = group.stats[PASS_BEFORE], group.stats[PASS_AFTER]
        markers = []
        if before.n:
            markers.append((0.0, before.mean, "o", "eval before RL"))
        if after.n and not math.isnan(group.steps_mean):
            markers.append((group.steps_mean, after.mean, "*", "eval after RL"))
        pass_at_1.append(SeedCurves(group.label, [run.pass_at_1_curve(PASS_AT_1_KEY) for run in group.completed_runs],
                                    markers))
    return {
        "reward_png": plot_seed_curves(reward, out_dir / REWARD_PNG, "Mean reward per step", REWARD_KEY),
        "pass_at_1_png": plot_seed_curves(pass_at_1, out_dir / PASS_AT_1_PNG, "Eval pass@1", PASS_AT_1_KEY),
    }


def build_report(
    run_dirs_or_sweep_dir: str | Path | Sequence[str | Path],
    out_dir: str | Path | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    ignore: Sequence[str] = (),
    extra_metrics: Sequence[str] = (),
    plots: bool = True,
    baseline: str | None = None,
    detect: float | None = None,
) -> Report:
    """Find run folders under the given folder(s), summarize them and write report.md, report.csv and the PNGs
    into `out_dir` (default: the first folder given). Returns the `Report` (rows as plain dicts)."""
    roots = ([run_dirs_or_sweep_dir] if isinstance(run_dirs_or_sweep_dir, str | Path)
             else list(run_dirs_or_sweep_dir))
    if not roots:
        raise ValueError("give at least one sweep folder or run folder")
    run_dirs = find_run_dirs(roots)
    if not run_dirs:
        raise FileNotFoundError(
            f"no run folders under {', '.join(map(str, roots))} (a run folder holds .hydra/config.yaml or spec.yaml)"
        )
    report = summarize([load_run(d) for d in run_dirs], confidence=confidence, ignore=ignore,
                       extra_metrics=extra_metrics, baseline=baseline, detect=detect)
    out = Path(out_dir) if out_dir is not None else Path(roots[0])
    out.mkdir(parents=True, exist_ok=True)
    report.files["csv"] = write_csv(report, out / REPORT_CSV)
    if plots:
        report.files.update(write_plots(report, out))
    md_path = out / REPORT_MD
    md_path.write_text(render_markdown(report, out), encoding="utf-8")
    report.files["md"] = md_path
    return report


def console_summary(report: Report) -> str:
    out_dir = report.files["md"].parent if "md" in report.files else Path.cwd()
    parts = [text_table(*_display_table(report))]
    if report.paired is not None:
        parts += [f"\nPaired against {report.paired.baseline} (p Holm-corrected; see {REPORT_MD}):",
                  text_table(*comparison_table(report.paired))]
        parts += [f"  {note}" for note in report.paired.notes]
    if report.incomplete_runs:
        parts += [f"\nFailed or unfinished runs ({len(report.incomplete_runs)}):",
                  text_table(*_incomplete_table(report, out_dir))]
    n_notes = len(report.notes) + sum(len(run.notes) for run in report.runs)
    if n_notes:
        parts += [f"\n{n_notes} note(s) on damaged files or missing metrics: see the Notes section of {REPORT_MD}"]
    if report.files:
        parts += ["\nWrote: " + ", ".join(str(path) for path in report.files.values())]
    return "\n".join(parts)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m marin_rl.runlog.report",
        description=(
            "Summarize a sweep: group run folders that differ only in `seed`, and write report.md, report.csv "
            f"(one row per configuration: swept values, n_seeds, mean and CI over seeds of each final metric, "
            f"mean steps and wall time), {REWARD_PNG} and {PASS_AT_1_PNG}. Failed and unfinished runs are "
            "listed in report.md and on the console."
        ),
        epilog=(
            "A run folder is a directory with .hydra/config.yaml or spec.yaml; DIR may be a Hydra multirun "
            "folder (searched recursively) or a run folder. Examples:\n"
            "  python -m marin_rl.runlog.report multirun/2025-01-01/12-00-00\n"
            "  python -m marin_rl.runlog.report outputs/a outputs/b --out reports/ab\n"
            "  make report DIR=multirun/2025-01-01/12-00-00"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="sweep folder(s) or run folder(s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the report (default: the first DIR)")
    parser.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                        help="two-sided confidence level of the intervals over seeds (default: %(default)s)")
    parser.add_argument("--ignore", action="append", default=[], metavar="KEY",
                        help="also ignore KEY (and KEY.*) when grouping runs; repeatable. Always ignored: "
                             + ", ".join(DEFAULT_IGNORED_KEYS))
    parser.add_argument("--metric", action="append", default=[], metavar="KEY",
                        help="extra final metric: a dotted path into summary.json, e.g. eval_after_rl.pass_at_k; "
                             "repeatable")
    parser.add_argument("--baseline", default=None, metavar="KEY=VALUE",
                        help="configuration the others are compared with, seed by seed, e.g. 'loss=dapo_global' "
                             "(several pairs separated by spaces; default: the first configuration)")
    parser.add_argument("--detect", type=float, default=None, metavar="DIFF",
                        help="also report the seeds needed to detect a difference of DIFF (e.g. 0.05)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0.0 < args.confidence < 1.0:
        parser.error(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.detect is not None and not args.detect > 0.0:
        parser.error(f"--detect must be a positive difference, got {args.detect}")
    try:
        report = build_report(args.dirs, args.out, confidence=args.confidence, ignore=args.ignore,
                              extra_metrics=args.metric, plots=not args.no_plots, baseline=args.baseline,
                              detect=args.detect)
    except (FileNotFoundError, NotADirectoryError, ValueError) as error:
        parser.error(str(error))
    print(console_summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
