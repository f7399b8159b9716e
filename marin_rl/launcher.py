"""From a composed Hydra config to a running job: validate once, print the plan, dispatch on `mode`."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from marin_rl.config.plan import actor_plan, format_plan
from marin_rl.config.spec import RunSpec, SpecError, build_run_spec
from marin_rl.runlog.run_lock import RunFolderError, claim_run_folder, clear_run_folder, previous_run_entries

logger = logging.getLogger("marin_rl")

# The metric an Optuna sweep maximises unless the search config names another one.
DEFAULT_OBJECTIVE = "eval_after_rl.pass_at_1"


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def spec_from_hydra(cfg: DictConfig) -> tuple[RunSpec, str | None]:
    """Resolve and validate; returns the spec and the sweep objective (None: not set). Exits 2 on a bad config."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    objective = container.pop("objective", None)  # set by conf/hparams_search/*, not part of the run itself
    if objective is not None and (not isinstance(objective, str) or not objective.strip()):
        print(f"error: objective must be a dotted metric name such as {DEFAULT_OBJECTIVE!r}, got {objective!r}",
              file=sys.stderr)
        sys.exit(2)
    try:
        spec = build_run_spec(container)
    except SpecError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    return spec, objective


def write_spec(spec: RunSpec, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "spec.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    return path


def lookup_metric(summary: dict[str, Any], dotted: str) -> float | None:
    """summary["a"]["b"] for dotted="a.b" as a float; None if a key is missing or the value is not a number."""
    node: Any = summary
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def numeric_metrics(summary: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of every number in a summary: what an objective may name."""
    names: list[str] = []
    for key, value in summary.items():
        if isinstance(value, dict):
            names += numeric_metrics(value, f"{prefix}{key}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            names.append(f"{prefix}{key}")
    return names


def objective_value(summary: dict[str, Any], objective: str | None, default: str, run_dir: Path) -> float | None:
    """The value a sweeper optimises. A named objective must exist (a typo would otherwise sink the whole search
    after its first trial with an unclear message); without one, the default metric or None."""
    if objective is None:
        return lookup_metric(summary, default)
    value = lookup_metric(summary, objective)
    if value is None:
        raise KeyError(
            f"objective {objective!r} is not a number in {run_dir / 'summary.json'}; "
            f"numeric metrics there: {', '.join(numeric_metrics(summary))}"
        )
    return value


def run_from_hydra(cfg: DictConfig) -> float | None:
    spec, objective = spec_from_hydra(cfg)
    run_dir = hydra_run_dir()
    from marin_rl.objectives import warn_if_greedy

    if spec.mode == "rl":
        warn_if_greedy(spec.sampler.temperature, spec.sampler.top_k, spec.sampler.greedy, context="training")
    if spec.dry_run:
        print(yaml.safe_dump({"spec": spec.model_dump(mode="json")}, sort_keys=False))
        print(format_plan(actor_plan(spec)))
    if spec.mode == "rl":  # trainer + sampler on their devices: refuse a plan that cannot fit before anything starts
        from marin_rl.config.memory import check_memory_plan, format_memory_plan, memory_plan

        try:
            memory = memory_plan(spec)
            if spec.dry_run:
                print(format_memory_plan(memory))
            check_memory_plan(memory)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
    if spec.dry_run:
        if previous_run_entries(run_dir):  # never overwrite the spec.yaml of a run that lives there
            print(f"dry run: config is valid; {run_dir} holds a run, so no spec was written; nothing started.")
        else:
            print(f"dry run: config is valid; spec written to {write_spec(spec, run_dir)}; nothing started.")
        return None
    try:
        lock = claim_run_folder(run_dir, spec.resume, spec.overwrite)
    except RunFolderError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        return _checked_run(spec, objective, run_dir)
    finally:
        lock.release()


def _checked_run(spec: RunSpec, objective: str | None, run_dir: Path) -> float | None:
    """Preflight checks, the fresh-start clearing, then the run; Ctrl-C ends it with one line, not a traceback."""
    from marin_rl.config.preflight import PreflightError, preflight

    try:
        preflight(spec, run_dir)
    except PreflightError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if spec.overwrite and (cleared := clear_run_folder(run_dir)):
        print(f"overwrite=true: deleted the previous run's {len(cleared)} entries in {run_dir}", flush=True)
    write_spec(spec, run_dir)
    try:
        return _dispatch(spec, objective, run_dir)
    except KeyboardInterrupt:
        print(f"\ninterrupted. {resume_hint(spec, run_dir)}", file=sys.stderr, flush=True)
        sys.exit(130)


def resume_hint(spec: RunSpec, run_dir: Path) -> str:
    """What to type to continue an interrupted run (RL runs resume from their newest checkpoint)."""
    if spec.mode != "rl":
        return f"mode={spec.mode} cannot resume; rerun it with overwrite=true to start over in {run_dir}"
    from hydra.core.hydra_config import HydraConfig

    dropped = ("resume=", "overwrite=", "hydra.run.dir=", "+resume=", "++resume=")
    kept = [o for o in HydraConfig.get().overrides.task if not o.startswith(dropped)]
    return f"Continue with: python launch.py {' '.join([*kept, 'resume=auto', f'hydra.run.dir={run_dir}'])}"


def _dispatch(spec: RunSpec, objective: str | None, run_dir: Path) -> float | None:
    from marin_rl.runtime.compile_cache import use_compile_cache

    use_compile_cache(spec.hardware.compile_cache)
    if spec.mode == "rl":
        from marin_rl.modes.rl import run_rl

        summary = run_rl(spec, run_dir)
        return objective_value(summary, objective, DEFAULT_OBJECTIVE, run_dir)
    # the other modes run in this process: sft on hardware.trainer_mesh's devices, eval and generate on rollout_mesh's
    from marin_rl.runtime.actor_devices import claim_cpu_devices

    claim_cpu_devices(spec.hardware, "trainer" if spec.mode == "sft" else "rollout_worker")
    if spec.mode == "sft":
        from marin_rl.modes.sft import sft_main

        ckpt = sft_main(spec, run_dir)
        print(f"SFT checkpoint: {ckpt}")
        return None
    if spec.mode == "generate":
        from marin_rl.modes.generate import generate_main

        out = generate_main(spec, run_dir)
        print(f"synthetic data: {out}")
        return None
    if spec.mode == "eval":
        from marin_rl.modes.eval import eval_main

        summary = eval_main(spec, run_dir)
        return objective_value(summary, objective, "eval.pass_at_1", run_dir)
    raise AssertionError(f"unhandled mode {spec.mode}")
