"""The driver of an RL run: start Ray and the actors, step the trainer, watch for stalls, log, evaluate, summarize.

Data flows one way: env -> sampler (rollout workers) -> rollouts -> replay buffer (trainer) -> trainer ->
weights (object store or files) -> sampler. The driver only moves small things: metrics and control calls.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from marin_rl.runtime.ray_security import require_token_auth, secure_ray_environment
from marin_rl.spec import RunSpec
from marin_rl.tracking import (
    WALL_BEFORE_RESUME,
    MetricsLog,
    WandbLogger,
    format_summary_table,
    plot_curves,
    read_metrics,
    write_summary,
)

logger = logging.getLogger(__name__)

WORKER_RESTART_LIMIT = -1  # Ray restarts a dead rollout worker without limit; the run never waits on a dead one
# How often a job that waits for its placement group says so. It waits without a deadline: in a sweep on a small
# machine the other jobs hold the CPUs, and a queue of N jobs can wait N runs long.
RESOURCE_WAIT_REPORT_S = 30.0


def actor_runtime_env(spec: RunSpec) -> dict[str, Any]:
    """Environment of the run's actors; also set per actor, since a sweep job's Ray was started without it."""
    # Actors import jax; keep them on the CPU unless the hardware group says otherwise.
    env_vars = {"JAX_PLATFORMS": "cpu"} if spec.hardware.accelerator == "cpu" else {}
    env_vars.update({"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
    return {"env_vars": env_vars}


def init_ray(spec: RunSpec, run_dir: Path) -> bool:
    """Join `ray.address` or start a private local Ray bound to 127.0.0.1, token authentication on either way
    (marin_rl/runtime/ray_security.py); True if this call connected.

    Inside a Ray task (a sweep job under hydra/launcher=ray) Ray is already connected: the job reuses that
    connection, and its actors are gang-scheduled in a placement group of their own so concurrent jobs never
    share or deadlock on resources.
    """
    import ray

    if ray.is_initialized():
        require_token_auth()
        return False

    namespace = spec.ray.namespace or f"marin-rl-{uuid.uuid4().hex[:8]}"
    secure_ray_environment(local=not spec.ray.address)
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    runtime_env = actor_runtime_env(spec)
    if spec.ray.address:
        ray.init(address=spec.ray.address, namespace=namespace, runtime_env=runtime_env, log_to_driver=True)
    else:
        ray.init(
            num_cpus=spec.ray.num_cpus or os.cpu_count(),
            include_dashboard=spec.ray.include_dashboard,
            dashboard_host="127.0.0.1",
            _node_ip_address="127.0.0.1",
            namespace=namespace,
            runtime_env=runtime_env,
            log_to_driver=True,
        )
    return True


def _actor_options(resources, **extra) -> dict:
    opts = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus, **extra}
    if resources.resources:
        opts["resources"] = dict(resources.resources)
    return opts


def _bundle(resources) -> dict[str, float]:
    bundle = {"CPU": resources.num_cpus, **resources.resources}
    if resources.num_gpus:
        bundle["GPU"] = resources.num_gpus
    return {k: v for k, v in bundle.items() if v}


def wait_for_placement_group(pg, bundles: list[dict[str, float]]) -> None:
    """Block until all bundles are reserved (no deadline), saying every RESOURCE_WAIT_REPORT_S what it waits for."""
    import ray

    need: dict[str, float] = {}
    for bundle in bundles:
        for key, amount in bundle.items():
            need[key] = need.get(key, 0.0) + amount
    print(f"waiting for resources: {bundles}", flush=True)
    t0, ready = time.monotonic(), pg.ready()
    while not ray.wait([ready], timeout=RESOURCE_WAIT_REPORT_S)[0]:
        total, free = ray.cluster_resources(), ray.available_resources()
        short = {k: total.get(k, 0.0) for k, v in need.items() if v > total.get(k, 0.0)}
        why = (
            f"the cluster has only {short} in total: waiting for nodes to join"
            if short
            else f"free now: { {k: free.get(k, 0.0) for k in need} }; other jobs (e.g. of a sweep) hold the rest"
        )
        print(f"still waiting after {time.monotonic() - t0:.0f}s for {need}: {why}", flush=True)
    ray.get(ready)


class RunDriver:
    def __init__(self, spec: RunSpec, run_dir: Path):
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.t0 = time.monotonic()
        self.weights_dir = spec.rollout.weight_sync.dir or str(self.run_dir / "weights")

    # --- actors --------------------------------------------------------------------------------------------
    def start_actors(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from marin_rl.coordinator import Coordinator
        from marin_rl.rollout_worker import RolloutWorker
        from marin_rl.trainer_actor import TrainerActor

        s, hw = self.spec, self.spec.hardware
        spec_dict = s.model_dump(mode="json")
        bundles = [_bundle(hw.trainer_resources)] + [_bundle(hw.rollout_resources)] * hw.num_rollout_workers
        self.pg = placement_group(bundles, strategy="PACK" if hw.accelerator == "cpu" else "SPREAD")
        wait_for_placement_group(self.pg, bundles)
        self.t0 = time.monotonic()  # the run's clock starts once it holds its resources, not while queued in a sweep

        def in_bundle(i: int) -> dict:
            return {
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
                "runtime_env": actor_runtime_env(s),
            }

        self.coordinator = ray.remote(Coordinator).options(num_cpus=0, max_concurrency=16).remote()
        self.trainer = ray.remote(TrainerActor).options(
            **_actor_options(hw.trainer_resources, max_concurrency=8), **in_bundle(0)
        ).remote(spec_dict, str(self.run_dir), self.coordinator, self.weights_dir)
        worker_cls = ray.remote(RolloutWorker)
        self.workers = [
            worker_cls.options(
                **_actor_options(hw.rollout_resources, max_concurrency=2, max_restarts=WORKER_RESTART_LIMIT),
                **in_bundle(1 + i),
            ).remote(spec_dict, i, self.coordinator, self.trainer, str(self.run_dir), self.weights_dir)
            for i in range(hw.num_rollout_workers)
        ]
        self.groups_per_worker = max(1, (s.train.batch_size // s.rollout.n_generations) // hw.num_rollout_workers)
        self.loops: dict[int, Any] = {}
        self.worker_restarts = 0

    def stop_actors(self) -> None:
        """Kill this run's actors and release its placement group (a no-op if they never started)."""
        import ray

        for actor in [*getattr(self, "workers", []), getattr(self, "trainer", None), getattr(self, "coordinator", None)]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        if getattr(self, "pg", None) is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.pg)

    def _start_loop(self, i: int) -> None:
        self.loops[i] = self.workers[i].run.remote(self.groups_per_worker)

    def _check_loops(self) -> None:
        """Restart the loop of any worker whose actor died (Ray restarts the actor itself)."""
        import ray

        for i, ref in list(self.loops.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            try:
                ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as err:
                self.worker_restarts += 1
                logger.warning("rollout worker %d died (%s); restarting its loop", i, type(err).__name__)
                self._start_loop(i)
            except ray.exceptions.RayTaskError:
                raise  # a bug or bad data in the worker: surface it with its traceback

    def _evaluate(self, min_version: int) -> dict:
        import ray

        from marin_rl.evaluation import summarize_eval

        t = self.spec.train
        out = ray.get(self.workers[0].evaluate.remote(t.eval_prompts, t.eval_samples, min_version))
        summary = summarize_eval(out["records"])
        summary["version"] = out["version"]
        return summary

    # --- the run -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import ray

        s = self.spec
        self.start_actors()
        info = ray.get(self.trainer.prepare.remote())
        start_step, extra = info["start_step"], info["extra"]
        if info["resumed_from"]:
            print(f"resumed from {info['resumed_from']} at step {start_step}", flush=True)
        metrics_log = MetricsLog(self.run_dir, resume_from_step=start_step if info["resumed_from"] else None)
        wandb = WandbLogger(
            self.run_dir, s.tracking.wandb_mode, s.tracking.project, s.tracking.entity,
            s.run_name or self.run_dir.name, s.model_dump(mode="json"),
        )
        eval_before = extra.get("eval_before_rl")
        if eval_before is None:
            print(f"evaluating the starting policy on {s.train.eval_prompts} held-out prompts ...", flush=True)
            eval_before = self._evaluate(start_step)
            ray.get(self.trainer.set_extra.remote("eval_before_rl", eval_before))
        print(f"eval before RL: pass@1 = {eval_before['pass_at_1']:.3f}", flush=True)
        for i in range(len(self.workers)):
            self._start_loop(i)
        step = start_step
        last_row: dict[str, Any] = {}
        sampled_tokens = 0
        sampling_seconds = 0.0
        bar = _progress(s, start_step)
        try:
            while step < s.train.steps:
                ref = self.trainer.train_step.remote(s.rollout.watchdog_timeout_s)
                while True:
                    ready, _ = ray.wait([ref], timeout=0.5)
                    if ready:
                        break
                    self._check_loops()
                row = ray.get(ref)
                step = row["step"]
                row["time_s"] = time.monotonic() - self.t0
                row["rollout/worker_restarts"] = self.worker_restarts
                if s.train.eval_every and step % s.train.eval_every == 0 and step < s.train.steps:
                    ev = self._evaluate(step)
                    row.update({f"eval/{k}": v for k, v in ev.items() if isinstance(v, (int, float))})
                if step % s.train.log_every == 0 or step == s.train.steps:
                    metrics_log.write(row)
                    wandb.log(row)
                sampled_tokens += row.get("throughput/sampled_tokens", 0)
                sampling_seconds += row.get("throughput/sampled_tokens", 0) / max(row.get("throughput/tokens_per_second", 0), 1e-9)
                last_row = row
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward/mean']:.3f}", tok_s=f"{row['throughput/tokens_per_second']:.0f}",
                                loss=f"{row.get('loss/total', float('nan')):.4f}")
        finally:
            bar.close()
            ray.get(self.coordinator.request_stop.remote("training finished"))
        ckpt = ray.get(self.trainer.checkpoint.remote())
        eval_after = self._evaluate(step)
        rows = read_metrics(self.run_dir / "metrics.jsonl")
        eval_rows = [
            {"step": start_step if not info["resumed_from"] else 0, "eval/pass_at_1": eval_before["pass_at_1"]},
            {"step": step, "eval/pass_at_1": eval_after["pass_at_1"]},
        ]
        summary = {
            "status": "completed",
            "error": None,
            "steps": step,
            "wall_seconds": time.monotonic() - self.t0 + extra.get(WALL_BEFORE_RESUME, 0.0),
            "tokens_per_second": sampled_tokens / sampling_seconds if sampling_seconds else 0.0,
            "eval_before_rl": eval_before,
            "eval_after_rl": eval_after,
            "final": {k: v for k, v in last_row.items() if isinstance(v, (int, float))},
            "sft": extra.get("sft"),
            "checkpoint": ckpt,
            "resumed_from": info["resumed_from"],
            "worker_restarts": self.worker_restarts,
        }
        write_summary(self.run_dir, summary)
        if s.tracking.plots:
            plot_curves(self.run_dir, sorted([*rows, *eval_rows], key=lambda r: r["step"]))
        wandb.finish(summary)
        print(format_summary_table(summary), flush=True)
        print(f"run folder: {self.run_dir}", flush=True)
        return summary


def _progress(spec: RunSpec, start: int):
    from tqdm import tqdm

    return tqdm(
        total=spec.train.steps, initial=start, desc="RL", unit="step", dynamic_ncols=True,
        disable=not spec.tracking.progress, file=sys.stdout,
    )


def run_rl(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """A whole RL run; on failure, summary.json says why (status=failed) and the error propagates."""
    import ray

    run_dir = Path(run_dir)
    owns_ray = init_ray(spec, run_dir)
    driver = RunDriver(spec, run_dir)
    try:
        return driver.run()
    except BaseException as err:
        write_summary(run_dir, {"status": "failed", "error": f"{type(err).__name__}: {err}"})
        raise
    finally:
        driver.stop_actors()
        if owns_ray:
            ray.shutdown()
        elif "wandb" in sys.modules:
            # A sweep job's Ray worker exits right after the task and takes wandb's service process with it; close
            # the service now, or wandb's own exit hook fails with "Connection lost".
            sys.modules["wandb"].teardown()


def eval_main(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """mode=eval: sample the held-out set with the configured policy in this process (no Ray) and summarize."""
    import jax

    from marin_rl.environments import build_environment
    from marin_rl.evaluation import summarize_eval
    from marin_rl.generation import eval_records, sample_and_score
    from marin_rl.models.policy import build_policy
    from marin_rl.sampler import Sampler

    model, tokenizer, _ = build_policy(spec.model, jax.random.PRNGKey(spec.seed))
    env = build_environment(spec.env, seed=spec.seed)
    sampler = Sampler(model, tokenizer, spec.sampler, spec.model.max_seq_len, version=0, seed=spec.seed)
    problems = env.eval_problems(spec.train.eval_prompts)
    samples = sample_and_score(
        sampler, env, problems, tokenizer, spec.model, spec.train.eval_samples,
        temperature=spec.sampler.eval_temperature, max_new_tokens=spec.sampler.eval_max_new_tokens,
    )
    summary = {"status": "completed", "eval": summarize_eval(eval_records(samples))}
    write_summary(run_dir, summary)
    print(f"eval pass@1 = {summary['eval']['pass_at_1']:.3f} on {len(problems)} prompts", flush=True)
    return summary
