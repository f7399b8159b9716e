"""The driver of an RL run: start Ray and the actors, step the trainer, watch for stalls, log, evaluate, summarize.

Data flows one way: env -> sampler (rollout workers) -> rollouts -> replay buffer (trainer) -> trainer ->
weights (object store or files) -> sampler. The driver only moves small things: metrics and control calls.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from marin_rl.config.spec import RunSpec
from marin_rl.runlog.reader import read_metrics
from marin_rl.runlog.writer import (
    WALL_BEFORE_RESUME,
    MetricsLog,
    WandbLogger,
    format_summary_table,
    plot_curves,
    write_summary,
)
from marin_rl.runtime.compile_cache import total_programs
from marin_rl.runtime.ray_cluster import (
    actor_options,
    actor_runtime_env,
    resource_bundle,
    wait_for_placement_group,
)

logger = logging.getLogger(__name__)

COORDINATOR_THREADS = 16  # coordinator threads for short calls; +1 per rollout worker (it may block one in wait_for_news)
WORKER_RESTART_LIMIT = -1  # Ray restarts a dead rollout worker without limit; the run never waits on a dead one


def groups_for_worker(groups_per_step: int, n_workers: int, worker_id: int) -> int:
    """Worker `worker_id`'s share of a step's prompt groups: the remainder goes one each to the first workers."""
    return groups_per_step // n_workers + (1 if worker_id < groups_per_step % n_workers else 0)


def tokens_per_second(rows: list[dict[str, Any]]) -> float:
    """Sampled tokens / seconds spent sampling, summed over steps (rows ship both, so a skipped step adds its
    tokens and its seconds instead of a rate of 0)."""
    seconds = sum(row.get("time/sample_s", 0.0) for row in rows)
    return sum(row.get("throughput/sampled_tokens", 0) for row in rows) / seconds if seconds > 0 else 0.0


def with_method(spec: RunSpec, method: str) -> RunSpec:
    """`spec` with rollout.weight_sync.method set to `method`."""
    sync = spec.rollout.weight_sync.model_copy(update={"method": method})
    return spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"weight_sync": sync})})


def weight_channel(spec: RunSpec, run_dir: Path, alive_nodes: int) -> tuple[RunSpec, str | None, str]:
    """(spec with the weight-sync method this run uses, the channel's folder, why that method).

    rollout.weight_sync.method=auto takes shared memory where preflight.weight_sync_method allows it and the slot
    ring's pages can be reserved, else the object store. shared_memory set by name fails unless every actor can
    share this node and the ring fits. files: <run_dir>/weights or weight_sync.dir. object_store: no folder.
    """
    from marin_rl.config.preflight import slot_bytes, weight_sync_method
    from marin_rl.runtime.weight_sync import WeightSyncError, make_shm_dir, reserve_slots

    sync = spec.rollout.weight_sync
    method, why = weight_sync_method(spec, alive_nodes)
    if method == "files":
        return spec, sync.dir or str(run_dir / "weights"), why
    if method != "shared_memory":
        return with_method(spec, method), None, why
    if alive_nodes > 1:  # a sweep job's Ray (hydra/launcher=ray) may span nodes though ray.address is unset
        raise ValueError(
            f"rollout.weight_sync.method=shared_memory needs every actor on one node; this Ray has {alive_nodes} "
            "nodes; allowed: method=object_store or files"
        )
    size = slot_bytes(spec)
    folder = make_shm_dir()
    try:
        reserve_slots(folder, size)
    except BaseException as err:  # an interrupt mid-reservation too: no run cleans up a folder it never returned
        shutil.rmtree(folder, ignore_errors=True)
        if sync.method != "auto" or not isinstance(err, WeightSyncError):
            raise
        return with_method(spec, "object_store"), None, str(err)
    return with_method(spec, method), str(folder), why


def slots_unreachable(chosen_by_auto: bool, driver_node: str, actor_nodes: list[str]) -> str | None:
    """Why the actors cannot read shared-memory slots kept on the driver's node (None: they can). Raises for
    shared_memory set by name; rollout.weight_sync.method=auto then falls back to the object store."""
    away = sorted(set(actor_nodes) - {driver_node})
    if not away:
        return None
    why = f"the run's actors were placed on node(s) {away}, not on the driver's node {driver_node}"
    if not chosen_by_auto:
        raise ValueError(
            f"rollout.weight_sync.method=shared_memory: {why}, whose /dev/shm holds the slots; allowed: "
            "method=object_store or files"
        )
    return why


class RunDriver:
    def __init__(self, spec: RunSpec, run_dir: Path):
        import ray

        self.run_dir = Path(run_dir)
        self.t0 = time.monotonic()
        self.auto_weight_sync = spec.rollout.weight_sync.method == "auto"
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        self.spec, self.weights_dir, why = weight_channel(spec, self.run_dir, alive)
        self._say_weight_sync(why)

    def _say_weight_sync(self, why: str) -> None:
        method = self.spec.rollout.weight_sync.method
        where = f"; slots in {self.weights_dir}, removed when the run ends" if method == "shared_memory" else ""
        chose = "rollout.weight_sync.method=auto chose " if self.auto_weight_sync else ""
        print(f"weight sync: {chose}{method} ({why}{where})", flush=True)

    def release_weights_dir(self) -> None:
        """Remove the shared-memory slots (they hold RAM until deleted; actors killed mid-run cannot do it)."""
        if self.spec.rollout.weight_sync.method == "shared_memory" and self.weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    # --- actors --------------------------------------------------------------------------------------------
    def start_actors(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from marin_rl.runtime.coordinator import Coordinator
        from marin_rl.runtime.one_step_off import VERSION_LAG
        from marin_rl.runtime.rollout_worker import RolloutWorker
        from marin_rl.runtime.trainer_actor import TrainerActor

        s, hw = self.spec, self.spec.hardware
        n_trainers = hw.trainer_processes  # bundles 0..n_trainers-1: the trainer's JAX processes, then the workers
        bundles = [resource_bundle(hw.trainer_resources)] * n_trainers + [resource_bundle(hw.rollout_resources)] * hw.num_rollout_workers
        strategy = "PACK" if hw.accelerator == "cpu" else "SPREAD"
        if s.rollout.weight_sync.method == "shared_memory":
            strategy = "STRICT_PACK"  # every actor on this one node, even if the cluster grows later
        self.pg = placement_group(bundles, strategy=strategy)
        wait_for_placement_group(self.pg, bundles)
        if s.rollout.weight_sync.method == "shared_memory":
            from marin_rl.runtime.trainer_group import bundle_nodes

            here = ray.get_runtime_context().get_node_id()
            why = slots_unreachable(self.auto_weight_sync, here, bundle_nodes(self.pg, range(len(bundles))))
            if why is not None:  # auto on a cluster that grew: the object store instead, said before any actor starts
                self.release_weights_dir()
                self.spec, self.weights_dir = with_method(s, "object_store"), None
                self._say_weight_sync(why)
                s = self.spec
        spec_dict = s.model_dump(mode="json")  # after the placement check: what the actors get
        self.t0 = time.monotonic()  # the run's clock starts once it holds its resources, not while queued in a sweep

        jax_env: list[dict] = [{}]
        if n_trainers > 1:
            from marin_rl.runtime import trainer_group

            node = trainer_group.require_one_node(trainer_group.bundle_nodes(self.pg, range(n_trainers)), n_trainers)
            address = trainer_group.coordinator_address_on(node)
            jax_env = [trainer_group.jax_process_env(address, n_trainers, i) for i in range(n_trainers)]

        def in_bundle(i: int) -> dict:
            env = actor_runtime_env(s, "trainer" if i < n_trainers else "rollout_worker")
            if i < n_trainers:
                env["env_vars"].update(jax_env[i])
            return {
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
                "runtime_env": env,
            }

        # Named (unique per run, even in a shared namespace) so rollout workers get names, not handles: see there.
        names = {role: f"marin-rl-{uuid.uuid4().hex[:12]}-{role}" for role in ("coordinator", "trainer")}
        self.coordinator = ray.remote(Coordinator).options(
            name=names["coordinator"], num_cpus=0, max_concurrency=COORDINATOR_THREADS + hw.num_rollout_workers
        ).remote(lag=VERSION_LAG[s.rollout.mode])
        trainers = [
            ray.remote(TrainerActor).options(
                name=names["trainer"] + (f"-{i}" if i else ""), **actor_options(hw.trainer_resources, max_concurrency=8),
                **in_bundle(i),
            ).remote(spec_dict, str(self.run_dir), self.coordinator, self.weights_dir)
            for i in range(n_trainers)
        ]
        self.trainer, self.trainer_followers = trainers[0], trainers[1:]
        if self.trainer_followers:
            ray.get(self.trainer.set_followers.remote(self.trainer_followers))  # before prepare: its calls may overlap
        worker_cls = ray.remote(RolloutWorker)
        self.workers = [
            worker_cls.options(
                **actor_options(hw.rollout_resources, max_concurrency=2, max_restarts=WORKER_RESTART_LIMIT),
                **in_bundle(n_trainers + i),
            ).remote(spec_dict, i, names["coordinator"], names["trainer"], str(self.run_dir), self.weights_dir)
            for i in range(hw.num_rollout_workers)
        ]
        groups_per_step = s.train.batch_size // s.rollout.n_generations
        self.groups_per_worker = [
            groups_for_worker(groups_per_step, hw.num_rollout_workers, i) for i in range(hw.num_rollout_workers)
        ]
        self.loops: dict[int, Any] = {}
        self.worker_restarts = 0

    def actor_nodes(self) -> dict[str, Any]:
        """The Ray node id each actor runs on, asked of the actor itself (ray.get_runtime_context() inside it)."""
        import ray

        def node_of(actor) -> Any:
            return actor.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())

        trainer_ref, worker_refs = node_of(self.trainer), [node_of(w) for w in self.workers]
        return {"trainer": ray.get(trainer_ref), "rollout_workers": ray.get(worker_refs)}

    def stop_actors(self) -> None:
        """Kill this run's actors and release its placement group (a no-op if they never started)."""
        import ray

        actors = [*getattr(self, "workers", []), getattr(self, "trainer", None), *getattr(self, "trainer_followers", [])]
        for actor in [*actors, getattr(self, "coordinator", None)]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
        if getattr(self, "pg", None) is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.pg)

    def _start_loop(self, i: int) -> None:
        self.loops[i] = self.workers[i].run.remote(self.groups_per_worker[i], sum(self.groups_per_worker))

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

        from marin_rl.runlog.eval_summary import summarize_eval

        t = self.spec.train
        out = ray.get(self.workers[0].evaluate.remote(t.eval_prompts, t.eval_samples, min_version))
        summary = summarize_eval(out["records"])
        summary["version"] = out["version"]
        return summary

    # --- the run -------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import ray

        from marin_rl.environments.decontam import decontam_line

        self.start_actors()
        s = self.spec  # after start_actors: rollout.weight_sync.method=auto may have fallen back there
        nodes = self.actor_nodes()
        info = ray.get(self.trainer.prepare.remote())
        start_step, extra = info["start_step"], info["extra"]
        if info["resumed_from"]:
            print(f"resumed from {info['resumed_from']} at step {start_step}", flush=True)
        metrics_log = MetricsLog(self.run_dir, resume_from_step=start_step if info["resumed_from"] else None)
        wandb = WandbLogger(
            self.run_dir, s.tracking.wandb_mode, s.tracking.project, s.tracking.entity,
            s.run_name or self.run_dir.name, s.model_dump(mode="json"),
        )
        decontam = ray.get(self.workers[0].decontamination.remote())
        print(decontam_line(decontam), flush=True)
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
        rows_seen: list[dict[str, Any]] = []
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
                row["throughput/tokens_per_second"] = tokens_per_second([row])  # for curves; the summary sums
                if s.train.eval_every and step % s.train.eval_every == 0 and step < s.train.steps:
                    ev = self._evaluate(step)
                    row.update({f"eval/{k}": v for k, v in ev.items() if isinstance(v, (int, float))})
                if step % s.train.log_every == 0 or step == s.train.steps:
                    metrics_log.write(row)
                    wandb.log(row)
                every = s.train.checkpoint_every
                if every and step % every == 0:  # on cadence whatever the step did, skipped steps included
                    # after the step's row is written: a run killed in between resumes from the checkpoint before
                    # and redoes this step, where a checkpoint saved first would resume past a row never written
                    row["checkpoint"] = ray.get(self.trainer.checkpoint.remote())
                rows_seen.append(row)
                last_row = row
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward/mean']:.3f}", tok_s=f"{row['throughput/tokens_per_second']:.0f}",
                                loss=f"{row.get('loss/total', float('nan')):.4f}")
        finally:
            bar.close()
            ray.get(self.coordinator.request_stop.remote("training finished"))
        ckpt = last_row.get("checkpoint") or ray.get(self.trainer.checkpoint.remote())  # the last step's, if on cadence
        eval_after = self._evaluate(step)
        programs = total_programs(ray.get([a.program_stats.remote() for a in [self.trainer, *self.workers]]))
        rows, _ = read_metrics(self.run_dir / "metrics.jsonl")
        eval_rows = [
            {"step": start_step if not info["resumed_from"] else 0, "eval/pass_at_1": eval_before["pass_at_1"]},
            {"step": step, "eval/pass_at_1": eval_after["pass_at_1"]},
        ]
        summary = {
            "status": "completed",
            "error": None,
            "steps": step,
            "wall_seconds": time.monotonic() - self.t0 + extra.get(WALL_BEFORE_RESUME, 0.0),
            "tokens_per_second": tokens_per_second(rows_seen),
            "eval_before_rl": eval_before,
            "eval_after_rl": eval_after,
            "final": {k: v for k, v in last_row.items() if isinstance(v, (int, float))},
            "sft": extra.get("sft"),
            "checkpoint": ckpt,
            "resumed_from": info["resumed_from"],
            "worker_restarts": self.worker_restarts,
            "decontam": decontam,  # None when off or when no component has a fixed training set
            "nodes": nodes,  # Ray node id of the trainer and of each rollout worker
            "weight_sync_method": s.rollout.weight_sync.method,  # the one used (rollout.weight_sync.method=auto chooses)
            "programs": programs,  # XLA programs of the trainer and workers: compiled, loaded (compile cache), seconds
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
