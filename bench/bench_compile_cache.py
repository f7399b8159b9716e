"""Relaunching a run with hardware.compile_cache: the same short RL run with the cache off, from an empty cache,
and from the cache that launch filled, alternated over --rounds rounds in one sitting.

    .venv/bin/python bench/bench_compile_cache.py                          # 4 steps of the tests' short run
    .venv/bin/python bench/bench_compile_cache.py --rounds 1 train.steps=8  # extra overrides go to every launch

The run: recipe=quickstart on env=mock's comparison task, batch 8 prompts x 4, a 30-step SFT warm-start, 16 eval
prompts, 4 RL steps (the short run of tests/e2e.py). Printed per launch: seconds from process start to exit, the
run's own wall_seconds (summary.json), and the XLA programs its trainer and rollout worker compiled and loaded from
the cache, with the seconds spent getting them (summary.json "programs"); then the median of each setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHORT_RUN = [
    "recipe=quickstart", "env=mock", "env.components.0.task=comparison", "train.batch_size=32",
    "rollout.n_generations=4", "train.eval_prompts=16", "sft.steps=30", "train.steps=4", "tracking.progress=false",
    "tracking.wandb_mode=disabled", "ray.num_cpus=2",
]
SETTINGS = ("off", "empty cache", "filled cache")


def launch(run_dir: Path, cache_dir: Path | None, overrides: list[str]) -> dict:
    cache = f"hardware.compile_cache.dir={cache_dir if cache_dir else 'null'}"
    cmd = [sys.executable, str(ROOT / "launch.py"), *SHORT_RUN, *overrides, cache, f"hydra.run.dir={run_dir}"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if out.returncode != 0:
        sys.exit(f"launch failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"launch_s": seconds, "run_s": summary["wall_seconds"], **summary["programs"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three settings, alternated")
    parser.add_argument("--out", type=Path, default=None, help="folder for the runs (default: a new temp folder)")
    parser.add_argument("overrides", nargs="*", help="extra launch.py overrides for every launch")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_compile_cache_"))
    results: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    print(f"{'round':>5}  {'setting':<12}  {'launch s':>8}  {'run s':>6}  {'compiled':>8}  {'loaded':>6}  {'get s':>6}")
    for r in range(args.rounds):
        cache_dir = out / f"cache{r}"
        for setting in SETTINGS:
            row = launch(out / f"run{r}-{setting.replace(' ', '_')}", None if setting == "off" else cache_dir,
                         args.overrides)
            results[setting].append(row)
            print(f"{r:>5}  {setting:<12}  {row['launch_s']:8.1f}  {row['run_s']:6.1f}  {row['compiled']:8d}  "
                  f"{row['loaded']:6d}  {row['seconds']:6.1f}", flush=True)
    print("\nmedians:")
    off = statistics.median(row["launch_s"] for row in results["off"])
    for setting, rows in results.items():
        launch_s = statistics.median(row["launch_s"] for row in rows)
        run_s = statistics.median(row["run_s"] for row in rows)
        print(f"  {setting:<12}  launch {launch_s:6.1f} s ({launch_s / off:.2f}x off)  run {run_s:6.1f} s")
    print(f"runs in {out}")


if __name__ == "__main__":
    main()
