"""Wall time per RL step, rollout.mode=sync vs one_step_off, on the quickstart recipe (runs alternate: A B A B ...).

    .venv/bin/python bench/bench_pipelining.py --steps 40 --repeats 2 [--out outputs/bench_pipelining]

Per-step wall = (time_s of the last step - time_s of the first) / (steps - 1): the first step (compiles, and the
one step that one_step_off cannot overlap) and the evaluations are outside it. Prints one line per run and the
ratio of the medians; speed is never asserted anywhere, it is measured here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from marin_rl.runlog.reader import read_metrics  # noqa: E402

MODES = ("sync", "one_step_off")


def per_step_wall(rows: list[dict]) -> float:
    """(time_s[last] - time_s[first]) / (step[last] - step[first]): steady-state seconds per step."""
    return (rows[-1]["time_s"] - rows[0]["time_s"]) / (rows[-1]["step"] - rows[0]["step"])


def one_run(mode: str, steps: int, run_dir: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, str(ROOT / "launch.py"), "recipe=quickstart", f"train.steps={steps}",
           f"rollout.mode={mode}", "tracking.progress=false", f"hydra.run.dir={run_dir}", *extra]
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    rows, _ = read_metrics(run_dir / "metrics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "mode": mode,
        "wall_s_per_step": per_step_wall(rows),
        "wait_rollouts_s_per_step": statistics.mean(r["time/wait_rollouts_s"] for r in rows[1:]),
        "pass_at_1_before": summary["eval_before_rl"]["pass_at_1"],
        "pass_at_1_after": summary["eval_after_rl"]["pass_at_1"],
        "process_wall_s": time.monotonic() - t0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="outputs/bench_pipelining")
    parser.add_argument("overrides", nargs="*", help="more launch.py overrides for every run")
    args = parser.parse_args()
    out = ROOT / args.out / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    results = []
    for i in range(args.repeats):
        for mode in MODES:
            r = one_run(mode, args.steps, out / f"{mode}-{i}", args.overrides)
            results.append(r)
            print(json.dumps(r), flush=True)
    median = {m: statistics.median(r["wall_s_per_step"] for r in results if r["mode"] == m) for m in MODES}
    print(f"median wall s/step: sync {median['sync']:.3f}, one_step_off {median['one_step_off']:.3f}, "
          f"ratio one_step_off/sync {median['one_step_off'] / median['sync']:.3f} (runs under {out})")


if __name__ == "__main__":
    main()
