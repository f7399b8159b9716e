"""The trainer actor: replay buffer, batch building, optimizer steps, weight publishing, checkpoints.

Rollout workers call `add_rollouts` (from their own threads; this actor runs with max_concurrency > 1) while
the driver calls `train_step` once per step. Weights are published after every step with version = number of
optimizer steps taken, so a rollout's per-token versions say exactly how stale each token is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jax
import numpy as np

from marin_rl.config.spec import RunSpec
from marin_rl.environments import build_environment
from marin_rl.models.policy import build_policy
from marin_rl.rollouts import RolloutGroup, pack_groups
from marin_rl.runlog.writer import WALL_BEFORE_RESUME
from marin_rl.runtime.replay_buffer import ReplayBuffer
from marin_rl.runtime.weight_sync import make_channel, model_to_arrays
from marin_rl.training.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from marin_rl.training.trainer import TrainBatch, Trainer, pad_train_batch

logger = logging.getLogger(__name__)


MIN_LENGTH_BUCKET = 32  # shortest padded sequence length the train step is compiled for


def length_bucket(longest: int, max_seq_len: int) -> int:
    """Pad rows to the next power of two (>= 32, <= max_seq_len): a handful of compiled shapes, little padding."""
    bucket = MIN_LENGTH_BUCKET
    while bucket < longest:
        bucket *= 2
    return min(bucket, max_seq_len)


def sampled_reward_metrics(stats: list[dict]) -> dict:
    """Reward and pass rate over everything sampled for this step, filtered groups included."""
    n = sum(st["n_rollouts"] for st in stats)
    return {
        "reward/mean": sum(st["reward_sum"] for st in stats) / n if n else float("nan"),
        "train/pass_rate": sum(st["correct_sum"] for st in stats) / n if n else float("nan"),
        "rollout/sampled": n,
    }


class StallError(RuntimeError):
    """No progress within rollout.watchdog_timeout_s: the message says what was missing."""


class NaNLossError(RuntimeError):
    """The loss went non-finite; the update was not applied and the last checkpoint is intact."""



class TrainerActor:
    def __init__(self, spec: dict, run_dir: str, coordinator: Any, weights_dir: str | None):
        self.spec = RunSpec.model_validate(spec)
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.coordinator = coordinator
        s = self.spec
        model, self.tokenizer, _ = build_policy(s.model, jax.random.PRNGKey(s.seed))
        self.trainer = Trainer(
            s.model, s.optimizer, s.loss, s.train, s.hardware, sampler_temperature=s.sampler.temperature,
            total_steps=s.train.steps,
        )
        self.state = self.trainer.init_state(model, jax.random.PRNGKey(s.seed + 1))
        self.extra: dict[str, Any] = {}
        self.started = time.monotonic()
        self.wall_before_resume = 0.0  # run time already spent before the checkpoint this run resumed from
        self.buffer = ReplayBuffer(
            s.rollout.replay.capacity, s.rollout.replay.max_reuse,
            0 if s.rollout.mode == "sync" else s.rollout.max_staleness,
        )
        self.channel = make_channel(s.rollout.weight_sync.method, weights_dir)
        self.rollout_stats: list[dict] = []
        self.stats_lock = threading.Lock()
        self.groups_per_step = s.train.batch_size // s.rollout.n_generations

    @property
    def version(self) -> int:
        return int(self.state.step)

    # --- start-up ------------------------------------------------------------------------------------------
    def prepare(self) -> dict:
        """Resume or warm-start, then publish the first weights. Returns what the driver needs to continue."""
        resumed_from = None
        ckpt = self._checkpoint_to_resume()
        if ckpt is not None:
            self.state, self.extra = restore_checkpoint(ckpt, self.state)
            self.wall_before_resume = float(self.extra.get(WALL_BEFORE_RESUME, 0.0))
            resumed_from = str(ckpt)
            logger.info("resumed from %s at step %d", ckpt, self.version)
        elif self.spec.sft.warmstart and self.spec.sft.steps > 0:
            self.extra["sft"] = self._warmstart()
        if self.spec.loss.kl.coef > 0:
            # KL is measured against the policy RL starts from (after any warm-start; on resume, the restored one).
            self.trainer.reference_model = self.state.model
        self.publish()
        return {"start_step": self.version, "resumed_from": resumed_from, "extra": self.extra}

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
            lr=s.sft.lr, seed=s.seed, max_seq_len=s.model.max_seq_len, log_path=self.run_dir / "sft_metrics.jsonl",
        )
        self.state = self.trainer.init_state(model, jax.random.PRNGKey(s.seed + 1))
        return {"steps": s.sft.steps, "seconds": time.monotonic() - t0, "final_loss": history[-1] if history else None}

    def set_extra(self, key: str, value: Any) -> None:
        self.extra[key] = value

    # --- weights and checkpoints ---------------------------------------------------------------------------
    def publish(self) -> float:
        t0 = time.monotonic()
        packet = self.channel.publish(model_to_arrays(self.state.model), self.version)
        import ray

        ray.get(self.coordinator.publish_weights.remote(packet))
        return time.monotonic() - t0

    def checkpoint(self) -> str:
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
        self.buffer.add(groups)
        with self.stats_lock:
            self.rollout_stats.append(stats)

    def fresh_groups(self) -> int:
        return self.buffer.available(self.version)

    def _wait_for_batch(self, timeout_s: float) -> list[RolloutGroup]:
        """Sync: this version's rounds from every worker. Inflight: a full batch of fresh-enough groups."""
        deadline = time.monotonic() + timeout_s
        n_workers = self.spec.hardware.num_rollout_workers
        while True:
            if self.spec.rollout.mode == "sync":
                with self.stats_lock:
                    rounds = sum(1 for st in self.rollout_stats if st["version"] == self.version)
                if rounds >= n_workers or self.buffer.available(self.version) >= self.groups_per_step:
                    return self.buffer.sample(
                        min(self.groups_per_step, self.buffer.available(self.version)), self.version, timeout_s=0
                    ) or []
            else:
                groups = self.buffer.sample(self.groups_per_step, self.version, timeout_s=0.05)
                if groups:
                    return groups
            if time.monotonic() > deadline:
                raise StallError(
                    f"no full batch of rollouts for step {self.version + 1} within {timeout_s:.0f}s "
                    f"(rollout.watchdog_timeout_s): {self.buffer.available(self.version)} fresh groups of "
                    f"{self.groups_per_step} needed; buffer stats {self.buffer.stats}"
                )
            time.sleep(0.01)

    # --- one optimizer step ----------------------------------------------------------------------------------
    def train_step(self, timeout_s: float) -> dict:
        s = self.spec
        t_wait = time.monotonic()
        groups = self._wait_for_batch(timeout_s)
        wait_s = time.monotonic() - t_wait
        with self.stats_lock:
            stats, self.rollout_stats = self.rollout_stats, []
        staleness_hist = dict(self.buffer.stats.last_staleness)
        rollouts = [r for g in groups for r in g.rollouts]
        if not groups:
            return self._skip_step(stats, wait_s)
        seq_len = length_bucket(max(len(r.prompt_tokens) + len(r.response_tokens) for r in rollouts), s.model.max_seq_len)
        packed = pack_groups(groups, seq_len, self.tokenizer.pad_token_id, s.loss.overlong.filter_truncated)
        batch = pad_train_batch(
            TrainBatch(packed.tokens, packed.loss_mask, packed.advantages, packed.sampler_logp),
            s.train.batch_size, seq_len, self.tokenizer.pad_token_id,
        )
        t_train = time.monotonic()
        try:
            new_state, metrics = self.trainer.train_step(self.state, batch)
        except FloatingPointError as err:
            raise NaNLossError(
                f"non-finite loss at step {self.version + 1}; the update was not applied. Last good checkpoint: "
                f"{latest_checkpoint(self.ckpt_dir)}. Lower optimizer.lr or check the rewards. ({err})"
            ) from None
        train_s = time.monotonic() - t_train
        self.state = new_state
        sync_s = self.publish()
        produced = sum(st["groups_produced"] for st in stats)
        filtered = sum(st["groups_filtered"] for st in stats)
        sampled_tokens = sum(st["sampled_tokens"] for st in stats)
        sample_s = sum(st["sample_seconds"] for st in stats)
        dropped = self.buffer.stats.dropped_stale * s.rollout.n_generations
        row = {
            "step": self.version,
            **sampled_reward_metrics(stats),
            "reward/mean_trained": float(np.mean([r.reward for r in rollouts])),
            "train/pass_rate_trained": float(np.mean([r.correct for r in rollouts])),
            "train/groups": len(groups),
            "rollout/response_len_mean": float(np.mean([len(r.response_tokens) for r in rollouts])) if rollouts else 0.0,
            "rollout/truncated_frac": float(np.mean([r.truncated for r in rollouts])) if rollouts else 0.0,
            "rollout/multi_version_fraction": float(np.mean([r.spans_versions for r in rollouts])) if rollouts else 0.0,
            "rollout/min_version": min((r.min_version for r in rollouts), default=-1),
            "replay/max_staleness_used": max(staleness_hist, default=0),
            "replay/staleness_hist": {str(k): v for k, v in sorted(staleness_hist.items())},
            "replay/dropped_stale": dropped,
            "replay/buffer_size": len(self.buffer),
            "filter/zero_variance_frac": filtered / produced if produced else 0.0,
            "filter/groups_produced": produced,
            "throughput/sampled_tokens": sampled_tokens,
            "throughput/tokens_per_second": sampled_tokens / sample_s if sample_s > 0 else 0.0,
            "throughput/train_tokens_per_second": float(packed.loss_mask.sum()) / train_s if train_s > 0 else 0.0,
            "time/wait_rollouts_s": wait_s,
            "time/train_step_s": train_s,
            "time/weight_publish_s": sync_s,
            "time/weight_sync_s": max((st.get("weight_sync_seconds", 0.0) for st in stats), default=0.0),
            "advantage/mean": float(np.mean(np.concatenate([g.advantages for g in groups]))) if groups else 0.0,
            "advantage/abs_mean": float(np.mean(np.abs(np.concatenate([g.advantages for g in groups])))) if groups else 0.0,
            **metrics,
        }
        if s.train.checkpoint_every and self.version % s.train.checkpoint_every == 0:
            row["checkpoint"] = self.checkpoint()
        return row

    def _skip_step(self, stats: list[dict], wait_s: float) -> dict:
        """Every group of the round was filtered (all answers equally right or wrong): no gradient exists.

        The step still counts (so a hopeless task cannot hang the run) and re-publishes the unchanged weights
        under the next version; `train/skipped` marks it.
        """
        import equinox as eqx

        self.state = eqx.tree_at(lambda st: st.step, self.state, self.state.step + 1)
        self.publish()
        produced = sum(st["groups_produced"] for st in stats)
        return {
            **sampled_reward_metrics(stats),
            "step": self.version, "train/skipped": 1, "train/groups": 0, "time/wait_rollouts_s": wait_s,
            "filter/zero_variance_frac": 1.0 if produced else 0.0, "filter/groups_produced": produced,
            "replay/max_staleness_used": 0, "replay/dropped_stale": self.buffer.stats.dropped_stale
            * self.spec.rollout.n_generations, "rollout/multi_version_fraction": 0.0,
            "throughput/sampled_tokens": sum(st["sampled_tokens"] for st in stats),
            "throughput/tokens_per_second": 0.0,
        }

    def get_step(self) -> int:
        return self.version

    def staleness_counter(self) -> Counter:
        return self.buffer.stats.last_staleness
