"""A rollout worker: holds a sampler and the environments, samples with the newest weights, grades, ships groups.

In `sync` mode it generates one round per policy version and then waits for the next version. In `inflight`
mode it keeps generating; between decode chunks it checks the coordinator and swaps new weights in mid-
generation, so a response's tokens can span several policy versions (recorded per token).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jax
import numpy as np

from marin_rl.environments import build_environment
from marin_rl.generation import eval_records, sample_and_score, to_rollout
from marin_rl.models.policy import build_policy
from marin_rl.objectives import apply_overlong_penalty
from marin_rl.rollouts import RolloutGroup, make_group
from marin_rl.sampler import Sampler
from marin_rl.spec import RunSpec
from marin_rl.weight_sync import WeightSyncError, arrays_into_model, make_channel

logger = logging.getLogger(__name__)


class RolloutWorker:
    def __init__(
        self, spec: dict, worker_id: int, coordinator: Any, trainer: Any, run_dir: str, weights_dir: str | None
    ):
        self.spec = RunSpec.model_validate(spec)
        self.worker_id = worker_id
        # The pid lets operators (and the fault-tolerance test) find this worker's process.
        pid_dir = Path(run_dir) / "workers"
        pid_dir.mkdir(parents=True, exist_ok=True)
        (pid_dir / f"rollout_worker_{worker_id}.pid").write_text(str(os.getpid()))
        import ray

        # The driver passes actor names, not handles: a handle among a restartable actor's constructor arguments
        # makes Ray print an error line ("constructor arguments in the object store and max_restarts > 0").
        self.coordinator = ray.get_actor(coordinator) if isinstance(coordinator, str) else coordinator
        self.trainer = ray.get_actor(trainer) if isinstance(trainer, str) else trainer
        # A restarted worker must not replay the same prompts: mix the restart time into the data seed.
        self.rng = np.random.default_rng([self.spec.seed, worker_id, time.time_ns() % (2**31)])
        self.env = build_environment(self.spec.env, seed=self.spec.seed + 1000 * worker_id)
        # The skeleton's random init is never sampled from: generate() waits for published weights first.
        skeleton, self.tokenizer, _ = build_policy(self.spec.model, jax.random.PRNGKey(0))
        self.template = skeleton
        self.sampler = Sampler(
            skeleton, self.tokenizer, self.spec.sampler, self.spec.model.max_seq_len,
            version=-1, seed=self.spec.seed * 7919 + worker_id,
        )
        self.channel = make_channel(self.spec.rollout.weight_sync.method, weights_dir)
        self.version = -1
        self.sampler_lock = threading.Lock()
        self.weight_sync_seconds = 0.0

    # --- weights -------------------------------------------------------------------------------------------
    def _try_pull_weights(self) -> bool:
        import ray

        packet = ray.get(self.coordinator.weights_newer_than.remote(self.version))
        if packet is None:
            return False
        t0 = time.monotonic()
        arrays = self.channel.fetch(packet, self.spec.rollout.weight_sync.timeout_s)
        model = arrays_into_model(self.template, arrays)
        self.sampler.set_weights(model, packet.version)
        self.version = packet.version
        self.weight_sync_seconds += time.monotonic() - t0
        return True

    def _wait_for_weights(self, newer_than: int) -> None:
        deadline = time.monotonic() + self.spec.rollout.weight_sync.timeout_s
        while self.version <= newer_than:
            if self._should_stop():
                return
            if not self._try_pull_weights():
                if time.monotonic() > deadline:
                    raise WeightSyncError(
                        f"worker {self.worker_id}: no weights newer than v{newer_than} within "
                        f"{self.spec.rollout.weight_sync.timeout_s}s (rollout.weight_sync.timeout_s)"
                    )
                time.sleep(0.02)

    def _should_stop(self) -> bool:
        import ray

        return ray.get(self.coordinator.should_stop.remote())

    # --- rollouts ------------------------------------------------------------------------------------------
    def _shape_rewards(self, samples) -> None:
        """DAPO's soft overlong punishment on each group's rewards (when loss.overlong.penalty is on)."""
        if not self.spec.loss.overlong.penalty:
            return
        for row in samples:
            shaped = apply_overlong_penalty(
                [s.score.reward for s in row], [len(s.completion.tokens) for s in row],
                self.spec.sampler.max_new_tokens, self.spec.loss.overlong,
            )
            row[:] = [replace(s, score=replace(s.score, reward=float(r))) for s, r in zip(row, shaped)]

    def collect(self, n_groups: int, on_chunk=None) -> tuple[list[RolloutGroup], dict]:
        """n_groups prompt groups; zero-variance groups dropped, topped up by dynamic sampling when enabled."""
        loss = self.spec.loss
        kept: list[RolloutGroup] = []
        produced = filtered = rounds = 0
        tokens = 0
        reward_sum = correct_sum = n_rollouts = 0.0
        t0 = time.monotonic()
        while len(kept) < n_groups:
            problems = self.env.sample(n_groups - len(kept), self.rng)
            with self.sampler_lock:
                samples = sample_and_score(
                    self.sampler, self.env, problems, self.tokenizer, self.spec.model,
                    self.spec.rollout.n_generations, on_chunk=on_chunk,
                )
            self._shape_rewards(samples)
            for row in samples:
                group = make_group([to_rollout(s) for s in row], loss.advantage)
                tokens += sum(len(r.response_tokens) for r in group.rollouts)
                reward_sum += float(group.rewards.sum())
                correct_sum += sum(r.correct for r in group.rollouts)
                n_rollouts += len(group)
                produced += 1
                if loss.filter_zero_variance and group.is_zero_variance:
                    filtered += 1
                else:
                    kept.append(group)
            if not loss.dynamic_sampling.enabled or rounds >= loss.dynamic_sampling.max_extra_rounds:
                break
            rounds += 1
        stats = {
            "groups_produced": produced,
            "groups_filtered": filtered,
            "sampled_tokens": tokens,
            "reward_sum": reward_sum,
            "correct_sum": correct_sum,
            "n_rollouts": n_rollouts,
            "sample_seconds": time.monotonic() - t0,
            "extra_rounds": rounds,
            "worker_id": self.worker_id,
            "version": self.version,
        }
        return kept[:n_groups], stats

    def run(self, groups_per_round: int) -> str:
        """The worker loop; returns when the coordinator says stop."""
        import ray

        inflight = self.spec.rollout.mode == "inflight"
        last_round_version = -1
        self._wait_for_weights(-1)

        def swap_between_chunks(_chunks_done: int) -> None:
            try:
                self._try_pull_weights()
            except WeightSyncError as err:  # keep the old, complete weights; say so
                logger.warning("%s", err)

        while not self._should_stop():
            if inflight:
                self._try_pull_weights()
                fresh = ray.get(self.trainer.fresh_groups.remote())
                if fresh >= groups_per_round * self.spec.hardware.num_rollout_workers:
                    # Back-pressure: one full batch is already waiting. Generating while the trainer trains on
                    # it keeps both busy, and the next weights arrive mid-generation (an in-flight swap).
                    time.sleep(0.02)
                    continue
            else:
                self._wait_for_weights(last_round_version)
                if self._should_stop():
                    break
            last_round_version = self.version
            self.coordinator.heartbeat.remote(self.worker_id, f"sampling v{self.version}")
            groups, stats = self.collect(groups_per_round, on_chunk=swap_between_chunks if inflight else None)
            stats["weight_sync_seconds"] = self.weight_sync_seconds
            ray.get(self.trainer.add_rollouts.remote(groups, stats))
        return "stopped"

    # --- evaluation ----------------------------------------------------------------------------------------
    def evaluate(self, n_prompts: int, n_samples: int, min_version: int) -> dict:
        """Sample the held-out problems with weights of at least `min_version`; per-sample records + version."""
        self._wait_for_weights(min_version - 1)
        problems = self.env.eval_problems(n_prompts)
        s = self.spec.sampler
        with self.sampler_lock:
            samples = sample_and_score(
                self.sampler, self.env, problems, self.tokenizer, self.spec.model, n_samples,
                temperature=s.eval_temperature, max_new_tokens=s.eval_max_new_tokens,
            )
        return {"version": self.version, "records": eval_records(samples)}

    def ping(self) -> int:
        return self.version
