"""mode=rl: a whole RL run on Ray (the driver in marin_rl.runtime.driver does the work)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from marin_rl.config.spec import RunSpec
from marin_rl.runlog.writer import write_summary
from marin_rl.runtime.driver import RunDriver
from marin_rl.runtime.ray_cluster import init_ray


def run_rl(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """A whole RL run; on failure, summary.json says why (status=failed, or interrupted on Ctrl-C) and the error
    propagates."""
    import ray

    run_dir = Path(run_dir)
    owns_ray = init_ray(spec, run_dir)
    driver = None
    try:
        driver = RunDriver(spec, run_dir)
        return driver.run()
    except KeyboardInterrupt:
        # Ctrl-C is a stop, not a failure: the run resumes from its newest checkpoint (launcher prints how)
        write_summary(run_dir, {"status": "interrupted", "error": None})
        raise
    except BaseException as err:
        write_summary(run_dir, {"status": "failed", "error": f"{type(err).__name__}: {err}"})
        raise
    finally:
        if driver is not None:
            driver.stop_actors()
        if owns_ray:
            ray.shutdown()
        elif "wandb" in sys.modules:
            # A sweep job's Ray worker exits right after the task and takes wandb's service process with it; close
            # the service now, or wandb's own exit hook fails with "Connection lost".
            sys.modules["wandb"].teardown()
        if driver is not None:
            driver.release_weights_dir()  # after the shutdown: a trainer still publishing cannot write a slot
