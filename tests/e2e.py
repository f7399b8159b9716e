"""Helpers for end-to-end tests: run launch.py in a subprocess with short-run overrides."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from marin_rl.runlog.reader import read_metrics

ROOT = Path(__file__).resolve().parents[1]

# A run that takes a few real RL steps in well under a minute of compute on 2 cores.
SHORT_RUN_ANY_ENV = [
    "recipe=quickstart",
    "train.batch_size=32",
    "rollout.n_generations=4",
    "train.eval_prompts=16",
    "sft.steps=30",
    "tracking.progress=false",
    "ray.num_cpus=2",
]
# "larger of a and b": a 30-step warm-start already answers some right, so groups carry reward variance
SHORT_RUN = [*SHORT_RUN_ANY_ENV, "env=mock", "env.components.0.task=comparison"]


def launch_cmd(*overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "launch.py"), *overrides]


def run_env() -> dict:
    return dict(os.environ, WANDB_MODE="offline", HF_HUB_OFFLINE="1",
                HYDRA_FULL_ERROR="1", PYTHONUNBUFFERED="1")


def launch(*overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(launch_cmd(*overrides), cwd=ROOT, env=run_env(), capture_output=True, text=True,
                          timeout=timeout)


def start(*overrides: str, log: Path) -> subprocess.Popen:
    """Start a run in its own process group (so the test can kill it with everything it started)."""
    return subprocess.Popen(launch_cmd(*overrides), cwd=ROOT, env=run_env(), stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def wait_for(
    predicate, timeout: float, proc: subprocess.Popen | None = None, what: str = "", every_s: float = 0.5
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"run exited ({proc.returncode}) before {what}")
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def metrics(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir / "metrics.jsonl")[0]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())
