"""Learning-curve plots for the sweep report: one line per configuration (mean over seeds) with a min-max band.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display), so it works headless and does not
disturb a caller's pyplot state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

LEGEND_INSIDE_MAX = 8  # more configurations than this: legend goes outside the axes
BAND_ALPHA = 0.2
FIGURE_SIZE = (8.0, 5.0)
DPI = 120


@dataclass(frozen=True)
class SeedCurves:
    """One configuration's curves: one {step: value} per seed, plus optional single points to mark."""

    label: str
    per_seed: Sequence[dict[int, float]]
    markers: Sequence[tuple[float, float, str, str]] = ()  # (x, y, matplotlib marker, legend text)


def mean_band(per_seed: Sequence[dict[int, float]]) -> tuple[list[int], list[float], list[float], list[float]]:
    """steps, mean, min, max over the seeds that logged each step (seeds may stop at different steps)."""
    steps = sorted({step for curve in per_seed for step in curve})
    means, lows, highs = [], [], []
    for step in steps:
        values = [curve[step] for curve in per_seed if step in curve]
        means.append(math.fsum(values) / len(values))
        lows.append(min(values))
        highs.append(max(values))
    return steps, means, lows, highs


def plot_seed_curves(curves: Sequence[SeedCurves], path: Path, title: str, ylabel: str) -> Path:
    """Write a PNG with mean-over-seeds lines and min-max bands; an empty plot says "no data" rather than vanish."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=FIGURE_SIZE)
    ax = fig.subplots()
    palette = matplotlib.colormaps["tab10" if len(curves) <= 10 else "tab20"]
    drew_any = False
    for index, config in enumerate(curves):
        color = palette(index % palette.N)
        steps, means, lows, highs = mean_band(config.per_seed)
        n_seeds = sum(1 for curve in config.per_seed if curve)
        if steps:
            ax.plot(steps, means, color=color, marker="." if len(steps) < 30 else None,
                    label=f"{config.label} (n={n_seeds})")
            if n_seeds > 1:
                ax.fill_between(steps, lows, highs, color=color, alpha=BAND_ALPHA, linewidth=0)
            drew_any = True
        for x, y, marker, _ in config.markers:
            ax.plot([x], [y], linestyle="none", marker=marker, color=color, markersize=9,
                    markerfacecolor="none" if marker == "o" else color)
            drew_any = True
    if not drew_any:
        ax.text(0.5, 0.5, "no data logged", ha="center", va="center", transform=ax.transAxes)
    marker_notes = sorted({(m, text) for config in curves for _, _, m, text in config.markers})
    subtitle = "line: mean over seeds, band: min-max over seeds"
    if marker_notes:
        subtitle += "; " + ", ".join(f"{m}: {text}" for m, text in marker_notes)
    ax.set_title(f"{title}\n{subtitle}", fontsize="medium")
    ax.set_xlabel("trainer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if any(line.get_label() and not line.get_label().startswith("_") for line in ax.get_lines()):
        if len(curves) <= LEGEND_INSIDE_MAX:
            ax.legend(fontsize="small", loc="best")
        else:
            ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path
