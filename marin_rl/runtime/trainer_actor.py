"""The trainer actor: replay buffer, batch preparation, optimizer steps, weight publishing, checkpoints.

Rollout workers call `add_rollouts` with raw graded groups (from their own threads; this actor runs with
max_concurrency > 1) while the driver calls `train_step` once per step. Each step draws groups from the buffer,
prepares them (marin_rl.training.data_processing: shaping, advantages, filtering), asks the workers for more when
dynamic sampling says the batch is short, trains, and publishes the weights with version = run steps taken, so a
rollout's per-token versions say exactly how stale each token is.

With hardware.trainer_processes > 1 this actor is one JAX process of several (runtime/trainer_group.py): process 0
leads and hands each follower the calls that touch JAX (`prepare`, `follow_step`, `checkpoint`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import equinox as eqx
import numpy as np

from marin_rl.config.seeds import derive_seed, jax_key
from marin_rl.config.spec import RunSpec
from marin_rl.environments import build_environment
from marin_rl.environments.grading import GRADING_COUNTS
from marin_rl.inference.mesh_placement import weight_devices
from marin_rl.models.policy import build_policy
from marin_rl.rollouts import RolloutGroup, staleness
from marin_rl.runlog.writer import WALL_BEFORE_RESUME
from marin_rl.runtime.compile_cache import count_programs
from marin_rl.runtime.one_step_off import MODE as ONE_STEP_OFF
from marin_rl.runtime.one_step_off import batch_weights_version
from marin_rl.runtime.replay_buffer import ReplayBuffer
from marin_rl.runtime.trainer_group import host_batch
from marin_rl.runtime.weight_sync import make_channel, model_to_arrays
from marin_rl.training.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    restore_checkpoint,
    restore_model,
    save_checkpoint,
)
from marin_rl.training.data_processing import PreparedBatch, prepare_batch
from marin_rl.training.multihost import initialize_distributed
from marin_rl.training.trainer import TrainBatch, Trainer, step_batch

logger = logging.getLogger(__name__)

REFERENCE_DIR = "reference"  # under the run folder: the KL reference policy, saved once when RL starts
POLL_S = 0.01  # how often a step waiting for rollouts looks at the buffer


class StallError(RuntimeError):
    """No progress within rollout.watchdog_timeout_s: the message says what was missing."""


class NaNLossError(RuntimeError):
    """The loss went non-finite; the update was not applied and the last checkpoint is intact."""


def _mean(values: list) -> float:
    return float(np.mean(values)) if values else float("nan")


def drawn_metrics(groups: list[RolloutGroup]) -> dict[str, float]:
    """Env reward, pass rate, length and truncation over every rollout drawn for a step, filtered ones included."""
    rollouts = [r for g in groups for r in g.rollouts]
    return {
        "reward/mean": _mean([r.reward for r in rollouts]),
        "train/pass_rate": _mean([r.correct for r in rollouts]),
        "rollout/sampled": len(rollouts),
        "rollout/response_len_mean": _mean([len(r.response_tokens) for r in rollouts]),
        "rollout/truncated_frac": _mean([r.truncated for r in rollouts]),
        "rollout/multi_version_fraction": _mean([r.spans_versions for r in rollouts]),
        "rollout/min_version": min((g.min_version for g in groups), default=-1),
    }


def trained_metrics(groups: list[RolloutGroup]) -> dict[str, float]:
    """Env reward and pass rate over the rollouts a step trained on (NaN for a skipped step)."""
    rollouts = [r for g in groups for r in g.rollouts]
    return {
        "reward/mean_trained": _mean([r.reward for r in rollouts]),
        "train/pass_rate_trained": _mean([r.correct for r in rollouts]),
    }


class TrainerActor:
    def __init__(self, spec: dict, run_dir: str, coordinator: Any, weights_dir: str | None):
        self.programs = count_programs()  # before the first compile
        self.spec = RunSpec.model_validate(spec)
        # one JAX process of several only when asked (the driver set JAX_COORDINATOR_ADDRESS etc.): a lone trainer on
        # a host of a multi-host TPU slice must not wait for the slice's other hosts
        processes = self.spec.hardware.trainer_processes
        self.is_leader = processes == 1 or initialize_distributed()["process_index"] == 0  # before any JAX device use
        self.followers: list = []  # the other trainer processes' actors (leader only; set_followers)
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.coordinator = coordinator
        s = self.spec
        model, self.tokenizer, _ = build_policy(s.model, jax_key(s.seed, "model-init"))
        self.trainer = Trainer(
            s.model, s.optimizer, s.loss, s.train, s.hardware, sampler_temperature=s.sampler.temperature,
            total_steps=s.train.steps,
        )
        self.state = self.trainer.init_state(model, jax_key(s.seed, "trainer"))
        self.extra: dict[str, Any] = {}
        self.started = time.monotonic()
        self.wall_before_resume = 0.0  # run time already spent before the checkpoint this run resumed from
        self.buffer = ReplayBuffer(
            s.rollout.replay.capacity, s.rollout.replay.max_reuse,
            0 if s.rollout.mode == "sync" else s.rollout.max_staleness,  # one_step_off: >= 1 (spec.py)
        )
        self.channel = make_channel(s.rollout.weight_sync.method, weights_dir)
        self.round_stats: list[dict] = []
        self.stats_lock = threading.Lock()
        self.groups_per_step = s.train.batch_size // s.rollout.n_generations
        self.base_version = 0  # the version RL (re)started from: one_step_off's pipeline starts there

    def program_stats(self) -> dict[str, float]:
        return self.programs.stats()

    @property
    def version(self) -> int:
        return int(self.state.step)

    def set_followers(self, followers: list) -> None:
        self.followers = followers

    def follow_step(self, batch: TrainBatch | None) -> None:
        """A follower's share of one leader step: the same update on the same batch (None: a skipped step), then
        the weight gather of publishing."""
        if batch is None:
            self._count_step_without_update()
        else:
            self.state, _ = self.trainer.train_step(self.state, batch)
        self.publish()

    def _await_followers(self, refs: list) -> None:
        if refs:
            import ray

            ray.get(refs)

    # --- start-up ------------------------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Resume or warm-start, then publish the first weights. Returns what the driver needs to continue."""
        resumed_from = None
        followers = [f.prepare.remote() for f in self.followers]  # the same restore, warm-start and publish
        ckpt = self._checkpoint_to_resume()
        if ckpt is not None:
            self.state, self.extra = restore_checkpoint(ckpt, self.state, mesh=self.trainer.mesh)
            self.wall_before_resume = float(self.extra.get(WALL_BEFORE_RESUME, 0.0))
            resumed_from = str(ckpt)
            logger.info("resumed from %s at step %d", ckpt, self.version)
        elif self.spec.sft.warmstart and self.spec.sft.steps > 0:
            self.extra["sft"] = self._warmstart()
        if self.spec.loss.kl.coef > 0:
            self.trainer.reference_model = self._reference_model(resumed_from)
        self.base_version = self.version
        self.publish()
        self._await_followers(followers)
        return {"start_step": self.version, "resumed_from": resumed_from, "extra": self.extra}

    def _reference_model(self, resumed_from: str | None) -> Any:
        """KL is measured against the policy RL started from (after any warm-start), also after a resume: it is
        saved once at the start and read back, never replaced by the restored policy. A run resumed from another
        folder (resume=<path>) reads that run's reference and keeps a copy in its own folder."""
        own = self.run_dir / REFERENCE_DIR
        if resumed_from is None:
            save_checkpoint(own, self.state, {"role": "KL reference"}, model_config=self.spec.model)
            return self.state.model
        source = own if self.spec.resume == "auto" else Path(self.spec.resume) / REFERENCE_DIR
        if not source.exists():
            raise FileNotFoundError(
                f"loss.kl.coef={self.spec.loss.kl.coef} > 0 but the KL reference {source} is missing; "
                "the run cannot resume without the policy it started from"
            )
        reference = restore_model(source, self.state.model, mesh=self.trainer.mesh)
        if source != own:
            save_checkpoint(own, eqx.tree_at(lambda st: st.model, self.state, reference), {"role": "KL reference"},
                            model_config=self.spec.model)
        return reference

    def _checkpoint_to_resume(self) -> Path | None:
        resume = self.spec.resume
        if resume == "never":
            return None
        directory = self.ckpt_dir if resume == "auto" else Path(resume) / "checkpoints"
        ckpt = latest_checkpoint(directory)
        if ckpt is None and resume != "auto":
            raise FileNotFoundError(f"resume={resume}: no checkpoint under {directory}")
        return ckpt

    def _warmstart(self) -> dict:
        from marin_rl.training.sft import run_sft, sft_examples

        s = self.spec
        env = build_environment(s.env, seed=s.seed)
        examples = sft_examples(s, env, self.tokenizer)
        t0 = time.monotonic()
        model, history = run_sft(
            self.state.model, self.tokenizer, examples, steps=s.sft.steps, batch_size=s.sft.batch_size,
            lr=s.sft.lr, seed=derive_seed(s.seed, "sft"), max_seq_len=s.model.max_seq_len, log_path=self.run_dir / "sft_metrics.jsonl",
            mesh=self.trainer.mesh,
        )
        self.state = self.trainer.init_state(model, jax_key(s.seed, "trainer"))
        return {"steps": s.sft.steps, "seconds": time.monotonic() - t0, "final_loss": history[-1] if history else None}

    def set_extra(self, key: str, value: Any) -> None:
        self.extra[key] = value

    # --- weights and checkpoints ---------------------------------------------------------------------------
    def publish(self) -> dict[str, float]:
        """Publish the current weights; this sync's seconds (gathering the shards to host + handing them to the
        channel) and bytes, as metrics."""
        import ray

        t0 = time.monotonic()
        arrays = model_to_arrays(self.state.model)  # every trainer process: a gather when the mesh spans them
        if not self.is_leader:
            return {}
        packet = self.channel.publish(arrays, self.version)
        ray.get(self.coordinator.publish_weights.remote(packet))
        return {"time/weight_publish_s": time.monotonic() - t0, "weights/sync_bytes": packet.nbytes}

    def checkpoint(self) -> str:
        followers = [f.checkpoint.remote() for f in self.followers]  # each process writes its own shards
        path = self._save_checkpoint()
        self._await_followers(followers)
        return path

    def _save_checkpoint(self) -> str:
        wall = self.wall_before_resume + time.monotonic() - self.started  # so a resumed run's wall time adds up
        path = save_checkpoint(
            checkpoint_path(self.ckpt_dir, self.version),
            self.state,
            {**self.extra, "step": self.version, WALL_BEFORE_RESUME: wall},
            model_config=self.spec.model, keep=self.spec.train.keep_checkpoints,
        )
        return str(path)

    # --- rollouts in -----------------------------------------------------------------------------------------
    def add_rollouts(self, groups: list[RolloutGroup], stats: dict) -> None:
        with self.stats_lock:  # first: a step woken by the groups must find their round's stats
            self.round_stats.append(stats)
        self.buffer.add(groups)

    def fresh_groups(self) -> int:
        return self.buffer.available(self.version)

    def _take_groups(self, n_groups: int, deadline: float, drawn: list[RolloutGroup]) -> list[RolloutGroup]:
        """n_groups fresh-enough groups from the buffer (sync: sampled with this version's weights; one_step_off:
        with the weights one step behind, the only ones there), none of them already `drawn` for this batch."""
        while True:
            groups = self.buffer.sample(n_groups, self.version, timeout_s=0.05, exclude=drawn)
            if groups:
                return groups
            if time.monotonic() > deadline:
                raise StallError(
                    f"no {n_groups} fresh groups of rollouts for step {self.version + 1} within "
                    f"{self.spec.rollout.watchdog_timeout_s:.0f}s (rollout.watchdog_timeout_s): "
                    f"{self.buffer.available(self.version)} available; buffer stats {self.buffer.stats}"
                )
            time.sleep(POLL_S)

    def _gather_batch(self, timeout_s: float) -> tuple[PreparedBatch, list[RolloutGroup]]:
        """(the prepared batch, every group drawn for it): one round, then dynamic-sampling rounds while short."""
        import ray

        s = self.spec
        deadline = time.monotonic() + timeout_s
        drawn = self._take_groups(self.groups_per_step, deadline, [])
        prepared = prepare_batch(drawn, s.loss, s.sampler.max_new_tokens, self.groups_per_step)
        while prepared.accounting.needs_more(s.loss.dynamic_sampling):
            extra = prepared.accounting.prompts_for_next_round()
            if s.rollout.mode == "sync":
                ray.get(self.coordinator.request_extra_groups.remote(self.version, extra))
            elif s.rollout.mode == ONE_STEP_OFF:  # with the weights the rest of the batch was sampled with
                weights = batch_weights_version(self.version + 1, self.base_version)
                ray.get(self.coordinator.request_extra_groups.remote(weights, extra))
            drawn += self._take_groups(extra, deadline, drawn)
            prepared = prepare_batch(
                drawn, s.loss, s.sampler.max_new_tokens, self.groups_per_step, prepared.accounting.rounds + 1
            )
        return prepared, drawn

    # --- one step ------------------------------------------------------------------------------------------
    def train_step(self, timeout_s: float) -> dict:
        import ray

        t_wait = time.monotonic()
        prepared, drawn = self._gather_batch(timeout_s)
        wait_s = time.monotonic() - t_wait
        with self.stats_lock:
            rounds, self.round_stats = self.round_stats, []
        if self.spec.rollout.mode == ONE_STEP_OFF:  # only now may the next step's batch start: its rounds are not ours
            ray.get(self.coordinator.batch_drawn.remote(self.version + 1))
        staleness_hist = Counter(staleness(g, self.version) for g in drawn)  # every draw of the batch
        buffer_size = len(self.buffer)  # before publishing: the next round may arrive right after
        grading = self._grading_metrics(rounds)
        if prepared.groups:
            row = self._optimizer_step(prepared)
        else:
            row = self._skip_step()
        row.update({
            "step": self.version,
            **drawn_metrics(drawn),
            **trained_metrics(prepared.groups),
            **prepared.metrics,
            "train/groups": len(prepared.groups),
            "replay/max_staleness_used": max(staleness_hist, default=0),
            "replay/staleness_hist": {str(k): v for k, v in sorted(staleness_hist.items())},
            "replay/dropped_stale": self.buffer.stats.dropped_stale * self.spec.rollout.n_generations,
            "replay/buffer_size": buffer_size,
            "throughput/sampled_tokens": sum(st["sampled_tokens"] for st in rounds),
            "time/sample_s": sum(st["sample_seconds"] for st in rounds),
            "time/weight_pull_s": sum(st["weight_pull_seconds"] for st in rounds),  # rounds of this step only
            "weights/pulled_bytes": sum(st["weight_pull_bytes"] for st in rounds),  # all workers
            # devices the sampler's weights span on the workers (hardware.rollout_mesh at work)
            "sampler/weight_devices": max((st["sampler_weight_devices"] for st in rounds), default=0),
            "trainer/weight_devices": weight_devices(self.state.model),  # hardware.trainer_mesh at work
            "time/engine_weight_load_s": sum(st["engine_load_seconds"] for st in rounds),
            "time/wait_rollouts_s": wait_s,
            **grading,
        })
        return row

    @staticmethod
    def _grading_metrics(rounds: list[dict]) -> dict[str, int]:
        """This step's grader counts (grader/graded, /timeouts, /crashes, /errors) over the rounds it consumed."""
        return {f"grader/{key}": sum(st.get(f"grader_{key}", 0) for st in rounds) for key in GRADING_COUNTS}

    def _optimizer_step(self, prepared: PreparedBatch) -> dict:
        s = self.spec
        batch, batch_metrics = step_batch(
            prepared.rollouts, prepared.advantages_B, s.train, s.model.max_seq_len, self.tokenizer.pad_token_id,
            s.loss.overlong.filter_truncated, s.hardware.trainer_shared_prompts, s.rollout.n_generations,
        )
        t_train = time.monotonic()
        followers = [f.follow_step.remote(host_batch(batch)) for f in self.followers]
        try:
            self.state, metrics = self.trainer.train_step(self.state, batch)
        except FloatingPointError as err:
            raise NaNLossError(
                f"non-finite loss at step {self.version + 1}; the update was not applied. Last good checkpoint: "
                f"{latest_checkpoint(self.ckpt_dir)}. Lower optimizer.lr or check the rewards. ({err})"
            ) from None
        train_s = time.monotonic() - t_train
        published = self.publish()
        self._await_followers(followers)
        return {
            **metrics,
            "train/skipped": 0,
            **batch_metrics,
            "time/train_step_s": train_s,
            **published,
        }

    def _skip_step(self) -> dict:
        """Every group drawn was filtered (all answers equally right or wrong): no gradient exists.

        The run step still counts (so a hopeless task cannot hang the run) and the unchanged weights are published
        under the next version; the optimizer applies no update, so its lr schedule does not advance.
        """
        followers = [f.follow_step.remote(None) for f in self.followers]
        self._count_step_without_update()
        published = self.publish()
        self._await_followers(followers)
        return {"train/skipped": 1, **published}

    def _count_step_without_update(self) -> None:
        """A skipped step: the run's step counter (the weights' version) advances, the model and optimizer do not."""
        self.state = eqx.tree_at(lambda st: st.step, self.state, self.state.step + 1)
