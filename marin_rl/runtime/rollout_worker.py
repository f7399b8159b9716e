"""A rollout worker: samples with the newest weights, grades, and ships the raw graded groups to the trainer.

It reads only the `env`, `sampler` and `rollout` sections (and the model's shape): what to do with a group
(shaping, advantages, filtering, how many more to ask for) is the trainer's business.

In `sync` mode it samples one round per policy version, then waits for the next version or for the trainer to ask
for more groups of the current one (dynamic sampling). In `inflight` mode it keeps sampling; between decode chunks
it swaps new weights in mid-generation, so a response's tokens can span several versions (recorded per token).
In `one_step_off` mode it samples the batch of the next step with the weights one version behind while the
trainer trains (runtime/one_step_off.py): each round with exactly the weights its step needs, never swapped mid-round.

Every round draws its prompts and its sampling key from a stream named by the round (see marin_rl.config.seeds):
a sync run is reproducible from its seed, and a restarted worker (a new incarnation) draws a fresh stream.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from marin_rl.config.seeds import derive_seed, numpy_rng
from marin_rl.config.spec import RunSpec
from marin_rl.environments import build_environment
from marin_rl.environments.decontam import decontamination_summary
from marin_rl.environments.grading import check_grader_errors, grading_counts
from marin_rl.inference.backends import build_sampler
from marin_rl.inference.graded_sampling import eval_records, sample_and_score, to_rollout
from marin_rl.inference.mesh_placement import rollout_mesh
from marin_rl.models.policy import policy_structure
from marin_rl.rollouts import RolloutGroup
from marin_rl.runtime.compile_cache import count_programs
from marin_rl.runtime.one_step_off import next_lagged_round
from marin_rl.runtime.weight_sync import (
    WeightPacket,
    WeightPlacement,
    WeightsSuperseded,
    WeightSyncError,
    make_channel,
)

logger = logging.getLogger(__name__)

POLL_S = 0.02  # how often an idle worker asks the coordinator for new weights or work
NEWS_WAIT_S = 1.0  # longest an idle sync worker blocks in Coordinator.wait_for_news before it looks around again


class RolloutWorker:
    def __init__(
        self, spec: dict, worker_id: int, coordinator: Any, trainer: Any, run_dir: str, weights_dir: str | None
    ):
        import ray

        self.programs = count_programs()  # before the first compile
        self.spec = RunSpec.model_validate(spec)
        self.worker_id = worker_id
        # The pid lets operators (and the fault-tolerance test) find this worker's process.
        pid_dir = Path(run_dir) / "workers"
        pid_dir.mkdir(parents=True, exist_ok=True)
        (pid_dir / f"rollout_worker_{worker_id}.pid").write_text(str(os.getpid()))
        # The driver passes actor names, not handles: a handle among a restartable actor's constructor arguments
        # makes Ray print an error line ("constructor arguments in the object store and max_restarts > 0").
        self.coordinator = ray.get_actor(coordinator) if isinstance(coordinator, str) else coordinator
        self.trainer = ray.get_actor(trainer) if isinstance(trainer, str) else trainer
        self.incarnation = ray.get(self.coordinator.register_worker.remote(worker_id))  # 0, then +1 per restart
        self.env = build_environment(self.spec.env, seed=derive_seed(self.spec.seed, "env", worker_id))
        self.structure, self.tokenizer = policy_structure(self.spec.model)
        self.run_dir = Path(run_dir)
        self.sampler = None  # built around the first weights that arrive (inference/backends.py)
        self.mesh = rollout_mesh(self.spec.hardware)  # hardware.rollout_mesh over this actor's devices
        self.placement = WeightPlacement(self.structure, self.mesh)  # where each pulled array goes
        self.channel = make_channel(self.spec.rollout.weight_sync.method, weights_dir)
        self.version = -1
        self.sampler_lock = threading.RLock()  # held across a round's (or an evaluation's) weight load and sampling
        self.load_lock = threading.Lock()  # held by each weight load (_load_weights), taken after sampler_lock
        self.pull_seconds = 0.0  # spent fetching weights since the last shipped round
        self.pull_bytes = 0  # weight bytes fetched since the last shipped round
        self.grading_seen = grading_counts(self.env)  # pool counters already reported

    # --- weights -------------------------------------------------------------------------------------------
    def _try_pull_weights(self, packet: WeightPacket | None = None) -> bool:
        """Load the newest weights if they are newer than ours: `packet` when the caller already holds it (from
        Coordinator.wait_for_news), else the coordinator's."""
        import ray

        if packet is None:
            packet = ray.get(self.coordinator.weights_newer_than.remote(self.version))
        if packet is None or packet.version <= self.version:
            return False
        try:
            self._load_weights(packet)
        except WeightsSuperseded:  # newer weights took its shared-memory slot: the next look finds them
            return False
        return True

    def _pull_exact_weights(self, version: int) -> None:
        """Load exactly weights `version` (one_step_off), whether newer or older than the current ones."""
        import ray

        if self.version == version:
            return
        packet = ray.get(self.coordinator.weights_at.remote(version))
        if packet is None:
            raise WeightSyncError(
                f"worker {self.worker_id}: weights v{version} are no longer held (the coordinator keeps the newest two)"
            )
        self._load_weights(packet)

    def _load_weights(self, packet) -> None:
        # One load at a time: the loop and an evaluation (max_concurrency=2) may both pull, and a load that saw no
        # sampler must be the one that builds it.
        with self.load_lock:
            t0 = time.monotonic()
            lent = self.channel.lends_memory
            with self.channel.fetched(packet, self.spec.rollout.weight_sync.timeout_s) as arrays:
                if self.sampler is None:  # a copy: the sampler is built after the slot is released
                    model = self.placement.model(arrays, lent=lent)
                else:  # placed as they are (on the CPU, views of a lent slot): set_weights copies what it keeps
                    self.sampler.set_weights(self.placement.model(arrays), packet.version, lent=lent)
            if self.sampler is None:
                self.sampler = build_sampler(
                    self.spec, model, self.tokenizer, version=packet.version,
                    seed=derive_seed(self.spec.seed, "sampler"),
                    workdir=self.run_dir / "workers" / f"engine_{self.worker_id}", mesh=self.mesh,
                )
            self.version = packet.version
            self.pull_seconds += time.monotonic() - t0
            self.pull_bytes += packet.nbytes

    def _wait_for_weights(self, newer_than: int, until_stop: bool = True) -> None:
        """Pull until weights newer than `newer_than` arrive (or, with until_stop, the run stops)."""
        deadline = time.monotonic() + self.spec.rollout.watchdog_timeout_s
        while self.version <= newer_than:
            if until_stop and self._should_stop():
                return
            if not self._try_pull_weights():
                self._check_deadline(deadline, f"no weights newer than v{newer_than}")
                time.sleep(POLL_S)

    def _check_deadline(self, deadline: float, what: str) -> None:
        # The watchdog's limit, not weight_sync.timeout_s: a sync worker legitimately idles through compiles,
        # checkpoints and evaluations, and the trainer's own watchdog reports real stalls.
        if time.monotonic() > deadline:
            raise WeightSyncError(
                f"worker {self.worker_id}: {what} within {self.spec.rollout.watchdog_timeout_s}s "
                "(rollout.watchdog_timeout_s)"
            )

    def _should_stop(self) -> bool:
        import ray

        return ray.get(self.coordinator.should_stop.remote())

    # --- rollouts ------------------------------------------------------------------------------------------
    def sample_groups(self, n_groups: int, stream: tuple, on_chunk=None) -> tuple[list[RolloutGroup], dict]:
        """n_groups prompts x rollout.n_generations responses, graded; prompts and sampling key from `stream`."""
        seed = self.spec.seed
        with self.sampler_lock:
            t0 = time.monotonic()  # inside the lock: time waiting for an evaluation is not sampling time
            loads_before = len(self.sampler.load_seconds)
            problems = self.env.sample(n_groups, numpy_rng(seed, "rollout-data", *stream))
            self.sampler.reseed(derive_seed(seed, "rollout-sampling", *stream))
            samples = sample_and_score(
                self.sampler, self.env, problems, self.tokenizer, self.spec.model,
                self.spec.rollout.n_generations, on_chunk=on_chunk,
            )
        groups = [RolloutGroup(tuple(to_rollout(s) for s in row)) for row in samples]
        stats = {
            "worker_id": self.worker_id,
            "version": self.version,
            "groups": len(groups),
            "sampled_tokens": sum(len(r.response_tokens) for g in groups for r in g.rollouts),
            "sample_seconds": time.monotonic() - t0,
            "weight_pull_seconds": self.pull_seconds,
            # in-place weight loads inside a vLLM engine (the Levanter sampler swaps arrays: none)
            "engine_load_seconds": sum(self.sampler.load_seconds[loads_before:]),
            "weight_pull_bytes": self.pull_bytes,
            "sampler_weight_devices": self.sampler.weight_devices,
            **self._grading_since_last_round(),
        }
        check_grader_errors(self.grading_seen, self.spec.env.grading)
        self.pull_seconds, self.pull_bytes = 0.0, 0
        return groups, stats

    def _grading_since_last_round(self) -> dict[str, int]:
        """grader_graded / grader_timeouts / grader_crashes / grader_errors of this round (pool counters' deltas)."""
        now = grading_counts(self.env)
        delta = {f"grader_{key}": now[key] - self.grading_seen[key] for key in now}
        self.grading_seen = now
        return delta

    def _next_sync_round(
        self, served_version: int, groups_per_round: int, packet: WeightPacket | None
    ) -> tuple[int, tuple] | None:
        """(groups, stream) of the next sync round: this worker's share of a new version (`packet`, or asked for
        when None), or extra groups the trainer asked for (dynamic sampling); None while there is neither."""
        import ray

        self._try_pull_weights(packet)
        if self.version > served_version:
            return groups_per_round, ("sync", self.worker_id, self.incarnation, self.version)
        claim = ray.get(self.coordinator.claim_extra_groups.remote(self.version, self.worker_id))
        if claim is None:
            return None
        n_groups, index = claim
        # Extra rounds are named by (version, index) alone, so whichever worker claims one draws the same data.
        return n_groups, ("extra", self.version, index)

    def run(self, groups_per_round: int, groups_per_step: int) -> str:
        """The worker loop (this worker's share of a step, and the whole step's groups for back-pressure); returns
        when the coordinator says stop."""
        import ray

        inflight = self.spec.rollout.mode == "inflight"
        self._wait_for_weights(-1)
        if self.spec.rollout.mode == "one_step_off":
            return self._run_one_step_off(groups_per_round)
        served_version, rounds = -1, 0
        idle_since = time.monotonic()

        def swap_between_chunks(_chunks_done: int) -> None:
            try:
                self._try_pull_weights()
            except WeightSyncError as err:  # keep the old, complete weights; say so
                logger.warning("%s", err)

        news = None  # the last wait_for_news answer: the stop flag and newer weights, without asking again
        while not (news.stop if news is not None else self._should_stop()):
            if inflight:
                swap_between_chunks(0)
                if ray.get(self.trainer.fresh_groups.remote()) >= groups_per_step:
                    # Back-pressure: one full batch is already waiting. Generating while the trainer trains on
                    # it keeps both busy, and the next weights arrive mid-generation (an in-flight swap).
                    time.sleep(POLL_S)
                    continue
                work = (groups_per_round, ("inflight", self.worker_id, self.incarnation, rounds))
            else:
                work = self._next_sync_round(served_version, groups_per_round, news and news.packet)
                news = None
                if work is None:
                    self._check_deadline(idle_since + self.spec.rollout.watchdog_timeout_s,
                                         f"no weights newer than v{self.version} and no extra work")
                    news = ray.get(self.coordinator.wait_for_news.remote(self.version, NEWS_WAIT_S))
                    continue
            served_version = self.version
            groups, stats = self.sample_groups(*work, on_chunk=swap_between_chunks if inflight else None)
            ray.get(self.trainer.add_rollouts.remote(groups, stats))
            rounds += 1
            idle_since = time.monotonic()
        return "stopped"

    def _run_one_step_off(self, groups_per_round: int) -> str:
        """The one_step_off loop: extra rounds first (the trainer waits on them), else this worker's share of the
        next step once the trainer trains the step before. A (re)started worker begins with the step after the last
        one drawn; a share it had already shipped before dying arrives twice, and the surplus goes stale."""
        import ray

        base_version, drawn_step = ray.get(self.coordinator.pipeline.remote())
        next_step, idle_since = drawn_step + 1, time.monotonic()
        while not self._should_stop():
            drawn_step = ray.get(self.coordinator.pipeline.remote())[1]
            work = next_lagged_round(
                next_step=next_step, drawn_step=drawn_step, base_version=base_version,
                last_step=self.spec.train.steps, extra=ray.get(self.coordinator.claim_extra_round.remote(self.worker_id)),
                worker_id=self.worker_id, incarnation=self.incarnation, groups_per_round=groups_per_round,
            )
            if work is None:
                self._check_deadline(idle_since + self.spec.rollout.watchdog_timeout_s,
                                     f"no batch drawn for step {next_step - 1} and no extra work")
                time.sleep(POLL_S)
                continue
            with self.sampler_lock:  # an evaluation cannot swap other weights in between
                self._pull_exact_weights(work.weights_version)
                groups, stats = self.sample_groups(work.n_groups, work.stream)
            ray.get(self.trainer.add_rollouts.remote(groups, stats))
            next_step = next_step if work.step is None else work.step + 1
            idle_since = time.monotonic()
        return "stopped"

    # --- evaluation ----------------------------------------------------------------------------------------
    def decontamination(self) -> dict | None:
        """What decontamination dropped from this worker's training problems (see environments/decontam.py)."""
        return decontamination_summary(self.env)

    def evaluate(self, n_prompts: int, n_samples: int, min_version: int) -> dict:
        """Sample the held-out problems with weights of at least `min_version`; per-sample records + version."""
        problems = self.env.eval_problems(n_prompts)
        s = self.spec.sampler
        with self.sampler_lock:  # a one_step_off round loads older weights under this lock: not in between
            self._wait_for_weights(min_version - 1, until_stop=False)  # the final eval runs after the stop request
            self.sampler.reseed(derive_seed(self.spec.seed, "eval", self.version))
            before = grading_counts(self.env)
            samples = sample_and_score(
                self.sampler, self.env, problems, self.tokenizer, self.spec.model, n_samples,
                temperature=s.eval_temperature, max_new_tokens=s.eval_max_new_tokens,
            )
            # evaluation grading is not a training round's: keep it out of the next round's grader_* counts
            after = grading_counts(self.env)
            self.grading_seen = {k: v + after[k] - before[k] for k, v in self.grading_seen.items()}
        return {"version": self.version, "records": eval_records(samples)}

    def ping(self) -> int:
        return self.version

    def program_stats(self) -> dict[str, float]:
        return self.programs.stats()
