"""Reading one run folder as the RL loop leaves it: config, overrides, metrics.jsonl and summary.json.

A run folder is any directory holding `.hydra/config.yaml` (Hydra run / multirun job) or `spec.yaml`. Nothing
here trusts the files to be whole: a run killed mid-write leaves a truncated last metrics line, a crashed run
has no summary.json. Every problem becomes a readable note on the `RunRecord` (with the line number for bad
metrics lines) instead of an exception, so a sweep report can list such runs rather than drop them.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HYDRA_CONFIG = Path(".hydra/config.yaml")
HYDRA_OVERRIDES = Path(".hydra/overrides.yaml")
SPEC_FILE = Path("spec.yaml")
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
STATUS_UNFINISHED = "unfinished"  # no (readable) summary.json: killed, still running, or crashed hard

STEP_KEY = "step"
TIME_KEY = "time_s"
DELETED_VALUE = "(deleted)"  # display value of a `~key` override


@dataclass
class RunRecord:
    """Everything the report needs from one run folder; `status` is completed, failed, unfinished or the raw
    status string a summary.json gave."""

    path: Path
    status: str
    reason: str | None
    config: dict[str, str]  # flattened composed config: "optimizer.lr" -> "0.0001"
    overrides: dict[str, str] | None  # "optimizer.lr" -> "0.0001"; None when .hydra/overrides.yaml is absent
    override_lines: list[str]  # the override strings as written, for listing failed runs
    seed: str | None
    last_step: int | None  # largest `step` seen in metrics.jsonl
    steps: float | None  # summary.json `steps`, else last_step
    wall_seconds: float | None  # summary.json `wall_seconds`, else the last `time_s` logged
    summary: dict[str, Any]
    metric_rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)  # problems found while reading, for the report

    @property
    def completed(self) -> bool:
        return self.status == STATUS_COMPLETED

    def curve(self, key: str) -> dict[int, float]:
        """step -> value of `key` over metrics.jsonl (a later line for the same step wins, e.g. after resume)."""
        points: dict[int, float] = {}
        for row in self.metric_rows:
            step, value = as_number(row.get(STEP_KEY)), as_number(row.get(key))
            if step is not None and value is not None:
                points[int(step)] = value
        return dict(sorted(points.items()))

    def pass_at_1_curve(self, key: str) -> dict[int, float]:
        """Held-out pass@1 by step: eval_before_rl at step 0, the mid-run evals logged under `key`, and
        eval_after_rl at the final step, so one line runs from the start of RL to its end."""
        points = self.curve(key)
        before = as_number((self.summary.get("eval_before_rl") or {}).get("pass_at_1"))
        after = as_number((self.summary.get("eval_after_rl") or {}).get("pass_at_1"))
        if before is not None:
            points.setdefault(0, before)  # a resumed run keeps the step-0 evaluation in its checkpoint
        if after is not None and self.steps is not None:
            points[int(self.steps)] = after
        return dict(sorted(points.items()))

    def last_logged(self, key: str) -> float | None:
        """The value of `key` on the last metrics line that has it."""
        for row in reversed(self.metric_rows):
            value = as_number(row.get(key))
            if value is not None:
                return value
        return None


def as_number(value: Any) -> float | None:
    """A finite float from a JSON/YAML value, or None (bools and NaN are not metric values)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def lookup(mapping: Mapping[str, Any], dotted: str) -> Any:
    """mapping["a"]["b/c"] for "a.b/c"; keys may themselves contain dots, so the longest matching key wins."""
    if dotted in mapping:
        return mapping[dotted]
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head, rest = ".".join(parts[:cut]), ".".join(parts[cut:])
        inner = mapping.get(head)
        if isinstance(inner, Mapping):
            found = lookup(inner, rest)
            if found is not None:
                return found
    return None


def is_run_dir(path: Path) -> bool:
    return (path / HYDRA_CONFIG).is_file() or (path / SPEC_FILE).is_file()


def _natural_key(path: Path) -> list[Any]:
    # Hydra names multirun jobs 0, 1, ..., 10: sort "10" after "9", not after "1".
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", str(path))]


def find_run_dirs(roots: Iterable[str | Path]) -> list[Path]:
    """Run folders at or below each root (a sweep folder, a multirun folder or a run folder), in natural order.

    The search does not descend into a run folder once found, nor into hidden folders (.git, .venv, .hydra).
    """
    found: dict[Path, Path] = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such directory")
        if not root.is_dir():
            raise NotADirectoryError(f"{root}: expected a sweep folder or a run folder, got a file")
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            if is_run_dir(here):
                found.setdefault(here.resolve(), here)
                dirnames[:] = []
            else:
                dirnames[:] = [name for name in dirnames if not name.startswith(".")]
    return sorted(found.values(), key=_natural_key)


def flatten_tree(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: nested mappings become dotted keys; other values (an empty mapping too) are leaves."""
    if isinstance(tree, Mapping) and tree:
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten_tree(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: tree}


def flatten(tree: Any) -> dict[str, str]:
    """flatten_tree with every leaf as text; lists and numbers become their JSON text so they compare as values."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        for key, value in flatten_tree(tree).items()
    }


def parse_override(line: str) -> tuple[str, str]:
    """("optimizer.lr", "0.0001") for "optimizer.lr=1e-4", using Hydra's own override grammar so that equal values
    written differently (1e-4, 0.0001) group together; "+key=v"/"++key=v" -> key, "~key" -> (key, "(deleted)")."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        override = OverridesParser.create().parse_override(line)
    except Exception:  # Hydra's grammar rejected it: fall back to the text on either side of the first "="
        key, _, value = line.partition("=")
        return key.lstrip("+~"), value
    key = override.key_or_group + (f"@{override.package}" if override.package else "")
    if override.is_delete():
        return key, DELETED_VALUE
    return key, override.get_value_element_as_str()


def read_metrics(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of a metrics.jsonl file and notes on every line that could not be read (with its number).

    A bad last line is reported as truncated (the run was stopped mid-write); bad lines elsewhere as invalid.
    """
    if not path.is_file():
        return [], []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    last_nonblank = max((i for i, line in enumerate(lines, 1) if line.strip()), default=0)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            what = "truncated final line (run stopped mid-write?)" if number == last_nonblank else "invalid JSON"
            notes.append(f"{path.name} line {number}: {what}: {error.msg}; line skipped")
            continue
        if not isinstance(row, dict):
            notes.append(f"{path.name} line {number}: expected a JSON object, got {type(row).__name__}; skipped")
            continue
        rows.append(row)
    return rows, notes


def _read_yaml(path: Path, notes: list[str]) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        notes.append(f"{path.name}: unreadable ({type(error).__name__}: {error}); ignored")
        return None


def _read_summary(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    if not path.is_file():
        return None, f"no {SUMMARY_FILE}"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        return None, f"{SUMMARY_FILE} unreadable ({type(error).__name__}: {error})"
    if not isinstance(summary, dict):
        return None, f"{SUMMARY_FILE} holds a {type(summary).__name__}, expected a JSON object"
    return summary, None


def load_run(run_dir: str | Path) -> RunRecord:
    """Read one run folder; never raises on a damaged or partial run, it records what is wrong instead."""
    run_dir = Path(run_dir)
    notes: list[str] = []

    config_path = run_dir / HYDRA_CONFIG if (run_dir / HYDRA_CONFIG).is_file() else run_dir / SPEC_FILE
    raw_config = _read_yaml(config_path, notes) if config_path.is_file() else None
    config = flatten(raw_config) if isinstance(raw_config, Mapping) else {}

    overrides: dict[str, str] | None = None
    override_lines: list[str] = []
    if (run_dir / HYDRA_OVERRIDES).is_file():
        raw_overrides = _read_yaml(run_dir / HYDRA_OVERRIDES, notes)
        if raw_overrides is None or isinstance(raw_overrides, list):
            override_lines = [str(line) for line in raw_overrides or []]
            overrides = dict(parse_override(line) for line in override_lines)
        else:
            notes.append(f"{HYDRA_OVERRIDES}: expected a list of strings, got {type(raw_overrides).__name__}")

    seed = (overrides or {}).get("seed", config.get("seed"))

    metric_rows, metric_notes = read_metrics(run_dir / METRICS_FILE)
    notes.extend(metric_notes)
    steps_seen = [int(s) for s in (as_number(row.get(STEP_KEY)) for row in metric_rows) if s is not None]
    last_step = max(steps_seen) if steps_seen else None
    last_time = next(
        (t for t in (as_number(row.get(TIME_KEY)) for row in reversed(metric_rows)) if t is not None), None
    )

    summary, summary_problem = _read_summary(run_dir / SUMMARY_FILE)
    if summary is None:
        status = STATUS_UNFINISHED
        seen = f"last step seen {last_step}" if last_step is not None else "no metrics logged"
        reason = f"{summary_problem}; {seen}"
        summary = {}
    else:
        raw_status = summary.get("status")
        status = str(raw_status) if raw_status is not None else "unknown"
        reason = None
        if status == STATUS_FAILED:
            reason = str(summary.get("error") or "failed without an error message")
        elif status != STATUS_COMPLETED:
            reason = f"{SUMMARY_FILE} status={raw_status!r}, expected {STATUS_COMPLETED!r}"

    summary_steps = as_number(summary.get("steps"))
    summary_wall = as_number(summary.get("wall_seconds"))
    return RunRecord(
        path=run_dir,
        status=status,
        reason=reason,
        config=config,
        overrides=overrides,
        override_lines=override_lines,
        seed=None if seed is None else str(seed),
        last_step=last_step,
        steps=summary_steps if summary_steps is not None else last_step,
        wall_seconds=summary_wall if summary_wall is not None else last_time,
        summary=summary,
        metric_rows=metric_rows,
        notes=notes,
    )
