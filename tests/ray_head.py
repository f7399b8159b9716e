"""Start Ray the way a run does (runtime.ray_cluster.init_ray on the quickstart spec), start one actor, print the GCS
address, then hold the cluster until stdin closes. Used by test_ray_security.py from a separate process."""

from __future__ import annotations

import sys
from pathlib import Path

import ray
from spec_helpers import compose_spec

from marin_rl.runtime.ray_cluster import actor_runtime_env, init_ray


@ray.remote(num_cpus=0)
class Probe:
    def ping(self) -> str:
        return "pong"


def main(run_dir: Path) -> None:
    spec = compose_spec(["recipe=quickstart", "ray.num_cpus=1"])
    assert init_ray(spec, run_dir)
    probe = Probe.options(runtime_env=actor_runtime_env(spec)).remote()
    assert ray.get(probe.ping.remote()) == "pong"  # a worker process with its own gRPC server is up
    print(f"GCS {ray.get_runtime_context().gcs_address}", flush=True)
    sys.stdin.read()
    ray.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
