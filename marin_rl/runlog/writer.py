"""Tracking: metrics.jsonl, summary.json, PNG curves, wandb (offline by default), console progress and summary."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from marin_rl.runlog.reader import flatten_tree, read_metrics

logger = logging.getLogger(__name__)

WALL_BEFORE_RESUME = "wall_seconds_before_resume"  # checkpoint extra: run seconds up to that checkpoint

PLOTTED = [  # (metric key, title) of the curves written as PNGs at the end of a run
    ("reward/mean", "mean reward"),
    ("train/pass_rate", "train pass rate"),
    ("eval/pass_at_1", "eval pass@1"),
    ("loss/total", "loss"),
    ("rollout/response_len_mean", "response length (tokens)"),
    ("loss/entropy", "policy entropy (nats / token)"),
    ("loss/clip_frac_high", "clip fraction (high side)"),
    ("train/grad_norm", "gradient norm"),
    ("throughput/tokens_per_second", "sampled tokens / s"),
]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    if hasattr(value, "item"):
        return _jsonable(value.item())
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class MetricsLog:
    """Append-only `metrics.jsonl`, one line per step; on resume, lines past the restored step are dropped."""

    def __init__(self, run_dir: Path, resume_from_step: int | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        if resume_from_step is not None and self.path.exists():
            kept = [row for row in read_metrics(self.path)[0] if row.get("step", 0) <= resume_from_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif resume_from_step is None and self.path.exists():
            self.path.unlink()

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(_jsonable(row)) + "\n")
            f.flush()


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    path = Path(run_dir) / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_jsonable(summary), indent=2))
    os.replace(tmp, path)
    return path


def plot_curves(run_dir: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """One PNG per metric that has data (`curves_<name>.png`) plus an overview grid `curves.png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []
    for key, title in PLOTTED:
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and "step" in r]
        if pts:
            series.append((key, title, pts))
    if not series:
        return []
    cols = 2
    nrows = math.ceil(len(series) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 3 * nrows), squeeze=False)
    for ax, (_key, title, pts) in zip(axes.flat, series):
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    fig.tight_layout()
    out = Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return [out]


class WandbLogger:
    """wandb in the run folder; offline unless tracking.wandb_mode=online. Failures never stop a run."""

    def __init__(self, run_dir: Path, mode: str, project: str, entity: str | None, name: str, config: dict):
        self.run = None
        if mode == "disabled":
            return
        try:
            import wandb

            self.run = wandb.init(
                project=project, entity=entity, name=name, config=config, dir=str(run_dir), mode=mode,
                reinit="finish_previous", settings=wandb.Settings(console="off", silent=True),
            )
        except Exception as err:  # tracking must not take a run down
            logger.warning("wandb init failed (%s); continuing without wandb", err)

    def log(self, row: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=int(row["step"]))
        except Exception as err:  # tracking must not take a run down: say so once, then go on without wandb
            self._give_up("log", err)

    def finish(self, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            for k, v in flatten_tree(summary).items():
                if isinstance(v, (int, float, str, bool)):
                    self.run.summary[k] = v
            self.run.finish()
        except Exception as err:
            self._give_up("finish", err)

    def _give_up(self, what: str, err: Exception) -> None:
        logger.warning("wandb %s failed (%s: %s); the run goes on without wandb (metrics.jsonl has every row)",
                       what, type(err).__name__, err)
        self.run = None


def format_summary_table(summary: dict[str, Any]) -> str:
    """A small fixed-width table for the console at the end of a run."""
    before = summary.get("eval_before_rl") or {}
    after = summary.get("eval_after_rl") or {}

    def ci(e: dict) -> str:
        if "pass_at_1" not in e:
            return "-"
        return f"{e['pass_at_1']:.3f} [{e.get('pass_at_1_ci_low', float('nan')):.3f}, {e.get('pass_at_1_ci_high', float('nan')):.3f}]"

    rows = [
        ("status", summary.get("status", "?")),
        ("steps", summary.get("steps", "?")),
        ("wall time", f"{summary.get('wall_seconds', 0):.1f} s"),
        ("sampled tokens/s", f"{summary.get('tokens_per_second', 0):.0f}"),
        ("eval pass@1 before RL", ci(before)),
        ("eval pass@1 after RL", ci(after)),
    ]
    if "pass_at_1" in before and "pass_at_1" in after:
        rows.append(("gain", f"{after['pass_at_1'] - before['pass_at_1']:+.3f}"))
    if programs := summary.get("programs"):
        rows.append(("XLA programs", f"{programs['compiled']} compiled, {programs['loaded']} loaded from the compile "
                                     f"cache ({programs['seconds']:.1f} s)"))
    if summary.get("decontam"):
        rows.append(("decontam/dropped", f"{summary['decontam']['dropped']} of {summary['decontam']['checked']}"))
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 40)
    return "\n".join([line, *[f"{k:<{width}}  {v}" for k, v in rows], line])
