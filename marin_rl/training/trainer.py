"""The RL trainer step: trainer-side log-probs, the configured policy loss, gradient accumulation, AdamW.

Batches are fixed-shape [B, S] (B = train.batch_size; pad with `pad_train_batch`), so the step compiles once.
Token layout (see `marin_rl.training.logprobs`): each row is prompt + response, left-aligned, right-padded with the pad id;
`loss_mask[b, t] = 1` on response tokens, and `sampler_logp[b, t]` is the sampler's log-prob of tokens[b, t] at the
SAME temperature the trainer uses (out[:, t] = log p(tokens[:, t] | tokens[:, :t])).

One optimizer step per batch. Gradient accumulation: the batch is cut into train.micro_batch_size rows; every
micro-batch uses the normalizer of the WHOLE batch (`batch_normalizer`), so the summed micro-batch losses and
gradients equal the full-batch loss and gradient (and the objectives' metrics are additive the same way).

Devices: the state lives on the mesh of hardware.trainer_mesh (training/mesh.py): parameters and AdamW moments
placed by Haliax's parameter axis mapping, the batch split over data x fsdp, the step traced under the compute
axis mapping; on one device every mapping is trivial and the same code runs.
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import haliax as hax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from marin_rl.config.spec import HardwareConfig, ModelConfig, OptimizerConfig, TrainConfig
from marin_rl.models.arrays import cast_floating, resolve_dtype
from marin_rl.objectives import LossConfig, batch_normalizer, policy_loss
from marin_rl.rollouts import Rollout
from marin_rl.training import mesh as meshes
from marin_rl.training.batch import length_bucket, pack_rollouts
from marin_rl.training.logprobs import token_stats
from marin_rl.training.multihost import global_array
from marin_rl.training.shared_prompts import (
    MIN_PART_BUCKET,
    SharedPromptRows,
    row_members,
    shared_prompt_rows,
)


class TrainBatch(eqx.Module):
    """One optimizer step of rollouts, fixed shape [B, S] (rows: prompt + response, right-padded)."""

    tokens: jax.Array  # int32[B, S]
    loss_mask: jax.Array  # f32[B, S]: 1 on response tokens that count
    advantages: jax.Array  # f32[B]: one advantage per response
    sampler_logp: (
        jax.Array
    )  # f32[B, S]: sampler's log p(tokens[:, t] | tokens[:, :t]) at the sampling temperature
    ref_logp: jax.Array | None = None  # f32[B, S]: reference-policy log-probs (KL term), optional
    # the rows the forward pass runs over when hardware.trainer_shared_prompts (training/shared_prompts.py)
    shared: SharedPromptRows | None = None


class TrainerState(eqx.Module):
    model: Any  # Levanter LmHeadModel (params in hardware.param_dtype)
    opt_state: Any
    step: jax.Array  # int32 scalar: optimizer steps taken
    key: jax.Array  # PRNG key (uint32[2]) for anything stochastic on the trainer side


def lr_schedule(opt_cfg: OptimizerConfig, total_steps: int) -> optax.Schedule:
    """lr(s) = peak * (s+1)/W for s < W (linear warmup), then peak * f(p), p = (s-W)/(T-W) in [0, 1], with
    f = 1 (constant), 1 - (1-r) p (linear) or r + (1-r)(1 + cos(pi p))/2 (cosine; Loshchilov & Hutter 2017), r =
    min_lr_ratio."""
    peak, ratio, warmup = opt_cfg.lr, opt_cfg.min_lr_ratio, opt_cfg.warmup_steps
    decay_steps = max(total_steps - warmup, 1)
    kind = opt_cfg.schedule

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        progress = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
        if kind == "constant":
            factor = jnp.ones_like(progress)
        elif kind == "linear":
            factor = 1.0 - (1.0 - ratio) * progress
        elif kind == "cosine":
            factor = ratio + (1.0 - ratio) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        else:
            raise ValueError(
                f"optimizer.schedule={kind!r} is not supported; allowed: constant, cosine, linear"
            )
        if warmup > 0:
            factor = jnp.where(step < warmup, (step + 1.0) / warmup, factor)
        return peak * factor

    return schedule


def _decay_mask(params: Any) -> Any:
    """Weight decay on matrices only (not norm scales or biases); the stacked "layer" axis does not count."""

    def is_matrix(x):
        if isinstance(x, hax.NamedArray):
            return len([a for a in x.axes if a.name != "layer"]) >= 2
        return getattr(x, "ndim", 0) >= 2

    return jax.tree.map(is_matrix, params, is_leaf=lambda x: isinstance(x, hax.NamedArray))


def make_optimizer(opt_cfg: OptimizerConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW (Loshchilov & Hutter 2019) on `lr_schedule`, after global-norm gradient clipping (max_grad_norm)."""
    if opt_cfg.name != "adamw":
        raise ValueError(f"optimizer.name={opt_cfg.name!r} is not supported; allowed: adamw")
    adamw = optax.adamw(
        learning_rate=lr_schedule(opt_cfg, total_steps),
        b1=opt_cfg.beta1,
        b2=opt_cfg.beta2,
        eps=opt_cfg.eps,
        weight_decay=opt_cfg.weight_decay,
        mask=_decay_mask,
    )
    if opt_cfg.max_grad_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(opt_cfg.max_grad_norm), adamw)


def schedule_count(opt_state: Any) -> jax.Array:
    """The updates the optimizer has applied: what its lr schedule reads (a skipped run step applies none)."""
    counts = [
        value for path, value in optax.tree_utils.tree_get_all_with_path(opt_state, "count")
        if getattr(path[-1], "tuple_name", None) == "ScaleByScheduleState"
    ]
    if len(counts) != 1:
        raise ValueError(f"expected one lr-schedule counter in the optimizer state, found {len(counts)}")
    return counts[0]


def trainable(model: Any) -> Any:
    """The floating-point leaves of a model (what the optimizer updates)."""
    return eqx.filter(model, eqx.is_inexact_array)


def step_batch(
    rollouts: list[Rollout], advantages_B: np.ndarray, train: TrainConfig, max_seq_len: int, pad_id: int,
    filter_truncated: bool, shared_prompts: bool = False, n_generations: int = 1,
) -> tuple[TrainBatch, dict[str, int]]:
    """The arrays of one optimizer step: rows packed at the length bucket of the longest row
    (train.length_buckets_per_octave), padded to [train.batch_size, bucket]; and their shape and loss tokens as
    metrics (counted on the host arrays, not read back from the device).

    With `shared_prompts` (hardware.trainer_shared_prompts) the forward pass runs over the shared-prompt layout:
    groups of at most `n_generations` responses per prompt; prompt and response lengths bucketed the same way (from
    MIN_PART_BUCKET), groups (at least the step's train.batch_size / n_generations, so filtered groups do not change
    the shape) and responses per group on the per-octave series from 1; the [B, L] arrays at L = P + T (at most
    max_seq_len), so (G, N, P, T) alone set the compiled shape."""
    longest = max(len(r.prompt_tokens) + len(r.response_tokens) for r in rollouts)
    per_octave = train.length_buckets_per_octave
    seq_len = length_bucket(longest, max_seq_len, per_octave=per_octave)
    if shared_prompts:
        prompts = [r.prompt_tokens for r in rollouts]
        responses = [r.response_tokens for r in rollouts]
        members_G = row_members(prompts, n_generations)
        G, N, P, T = (
            length_bucket(max(len(members_G), train.batch_size // n_generations), train.batch_size, 1, per_octave),
            length_bucket(max(map(len, members_G)), train.batch_size, 1, per_octave),
            length_bucket(max(map(len, prompts)), max_seq_len, MIN_PART_BUCKET, per_octave),
            length_bucket(max(map(len, responses)), max_seq_len, MIN_PART_BUCKET, per_octave),
        )
        seq_len = min(P + T, max_seq_len)  # the [B, L] arrays then add no compiled shapes of their own
    packed = pack_rollouts(rollouts, advantages_B, seq_len, pad_id, filter_truncated)
    batch = pad_train_batch(
        TrainBatch(packed.tokens_BS, packed.loss_mask_BS, packed.advantages_B, packed.sampler_logp_BS),
        train.batch_size, seq_len, pad_id,
    )
    run_tokens, run_len = batch.tokens.size, seq_len  # through the layers; a response's row length
    if shared_prompts:
        rows = shared_prompt_rows(prompts, responses, members_G, batch.tokens.shape, (G, N, P, T), pad_id)
        batch = TrainBatch(
            batch.tokens, batch.loss_mask, batch.advantages, batch.sampler_logp, shared=jax.tree.map(jnp.asarray, rows)
        )
        run_tokens, run_len = G * P + G * N * T, P + T
    return batch, {
        "train/longest_len": longest,  # prompt + response tokens of the longest row
        "train/padded_len": run_len,  # a response's padded prompt + response length in the forward pass
        # tokens through the layers, padding included (not the groups a mesh's batch split may add: Trainer._prepare)
        "train/padded_tokens": run_tokens,
        "throughput/trained_tokens": float(packed.loss_mask_BS.sum()),
    }


def pad_train_batch(batch: TrainBatch, batch_size: int, seq_len: int, pad_id: int = 0) -> TrainBatch:
    """Pad a smaller batch to the fixed [batch_size, seq_len] (extra rows/columns: pad id, mask 0, advantage 0)."""
    B, S = np.shape(batch.tokens)
    if B > batch_size or S > seq_len:
        raise ValueError(
            f"batch of shape [{B}, {S}] does not fit the fixed trainer shape [{batch_size}, {seq_len}]"
        )
    if batch.shared is not None and (B, S) != (batch_size, seq_len):
        raise ValueError("shared-prompt rows index the padded batch: build them after pad_train_batch")

    def pad(x, value, dtype):
        if x is None:
            return None
        x = np.asarray(x, dtype)
        widths = [(0, batch_size - B)] + ([(0, seq_len - S)] if x.ndim == 2 else [])
        return jnp.asarray(np.pad(x, widths, constant_values=value))

    return TrainBatch(
        tokens=pad(batch.tokens, pad_id, np.int32),
        loss_mask=pad(batch.loss_mask, 0.0, np.float32),
        advantages=pad(batch.advantages, 0.0, np.float32),
        sampler_logp=pad(batch.sampler_logp, 0.0, np.float32),
        ref_logp=pad(batch.ref_logp, 0.0, np.float32),
        shared=batch.shared,
    )


class Trainer:
    """Owns the optimizer and the jitted step; state lives in TrainerState so checkpoints are plain pytrees."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        opt_cfg: OptimizerConfig,
        loss_cfg: LossConfig,
        train_cfg: TrainConfig,
        hardware_cfg: HardwareConfig,
        sampler_temperature: float,
        *,
        vocab_chunk: int | None = None,
        reference_model: Any = None,
        total_steps: int | None = None,
        devices: list | None = None,
    ):
        if sampler_temperature <= 0:
            raise ValueError(
                f"sampler.temperature={sampler_temperature} must be > 0 to train (log-probs need a density)"
            )
        self.model_cfg, self.opt_cfg, self.loss_cfg = model_cfg, opt_cfg, loss_cfg
        self.train_cfg, self.hardware_cfg = train_cfg, hardware_cfg
        self.temperature = float(sampler_temperature)
        self.unroll_layers = hardware_cfg.trainer_unroll_layers
        self.vocab_chunk = vocab_chunk if vocab_chunk is not None else model_cfg.logprob_vocab_chunk
        self.batch_size = train_cfg.batch_size
        self.micro_batch_size = train_cfg.micro_batch_size or train_cfg.batch_size
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"train.micro_batch_size={self.micro_batch_size} must divide train.batch_size={self.batch_size}"
            )
        # the trainer's device mesh (hardware.trainer_mesh over `devices`, default all visible devices)
        self.mesh = meshes.build_mesh(hardware_cfg.trainer_mesh.model_dump(), devices)
        split = meshes.batch_split(self.mesh)
        if self.micro_batch_size % split:
            raise ValueError(
                f"train.micro_batch_size={self.micro_batch_size} must be divisible by data x fsdp = {split} of "
                f"hardware.trainer_mesh={meshes.mesh_sizes(self.mesh)} (every device takes whole rows)"
            )
        self.compute_dtype = resolve_dtype(hardware_cfg.compute_dtype)
        self.param_dtype = resolve_dtype(hardware_cfg.param_dtype)
        self.total_steps = total_steps if total_steps is not None else max(train_cfg.steps, 1)
        self.schedule = lr_schedule(opt_cfg, self.total_steps)
        self.optimizer = make_optimizer(opt_cfg, self.total_steps)
        self.reference_model = reference_model
        self.traces = 0  # times the train step was traced (== compiled): stays 1 at fixed shapes
        self._grads = eqx.filter_jit(self._grads_entry)  # `grads` alone (tests, tools)
        # train_step is one program, gradients then update: as two jitted calls it paid ~10 ms more Python
        # dispatch per step (Haliax's named_jit rebuilt every output's partition spec on each call), a third of the
        # whole step at 0.15M parameters (docs/benchmarks.md).
        self._step = None  # jitted on the first train_step, when the state's placement is known
        self._logprobs = eqx.filter_jit(self._logprobs_impl)

    @property
    def reference_model(self) -> Any:
        return self._reference_model

    @reference_model.setter
    def reference_model(self, model: Any) -> None:
        """The KL reference, in compute_dtype, sharded like the policy."""
        if model is not None and self.loss_cfg.kl.coef > 0:
            model = meshes.shard_params(cast_floating(model, self.compute_dtype), self.mesh)
        self._reference_model = model

    # ---- state -----------------------------------------------------------------------------------------------
    def init_state(self, model: Any, key: jax.Array | None = None) -> TrainerState:
        """Fresh TrainerState: params cast to hardware.param_dtype, new optimizer state, step 0, all sharded over
        the trainer mesh (parameters and optimizer moments by the Haliax parameter mapping, the rest replicated)."""
        model = meshes.shard_params(cast_floating(model, self.param_dtype), self.mesh)
        key = jax.random.PRNGKey(0) if key is None else key
        with meshes.compute_scope(self.mesh):
            opt_state = self.optimizer.init(trainable(model))
        state = TrainerState(model, opt_state, jnp.zeros((), jnp.int32), key)
        # Every leaf committed to its mesh sharding: jit keys its executables on placement, and restored
        # checkpoints come back placed the same way, so a resume hits the step compiled for the fresh state.
        return meshes.shard_params(state, self.mesh)

    def place_batch(self, batch: TrainBatch) -> TrainBatch:
        """Rows of the batch split over the mesh's data x fsdp devices (a global array: also across hosts)."""
        return jax.tree.map(lambda x: global_array(x, meshes.batch_sharding(self.mesh, x.ndim)), batch)

    # ---- log-probs -------------------------------------------------------------------------------------------
    def _logprobs_impl(self, model, tokens):
        return token_stats(
            cast_floating(model, self.compute_dtype), tokens, self.temperature, self.vocab_chunk, self.unroll_layers
        ).logp

    def logprobs(self, model: Any, tokens: jax.Array) -> jax.Array:
        """Trainer-side log-probs f32[B, S] at the sampler temperature (e.g. reference or recompute passes)."""
        tokens = jnp.asarray(tokens, jnp.int32)
        if tokens.shape[0] % meshes.batch_split(self.mesh) == 0:
            tokens = global_array(tokens, meshes.batch_sharding(self.mesh, tokens.ndim))
        with meshes.compute_scope(self.mesh):
            return self._logprobs(meshes.shard_params(model, self.mesh), tokens)

    # ---- the step --------------------------------------------------------------------------------------------
    def _micro_loss(self, params, static, micro: TrainBatch, normalizer, ref_model):
        cfg = self.loss_cfg
        model = cast_floating(eqx.combine(params, static), self.compute_dtype)
        stats = token_stats(
            model, micro.tokens, self.temperature, self.vocab_chunk, self.unroll_layers, micro.shared
        )
        # One optimizer step per batch, so the pre-update trainer log-probs ARE this forward's values.
        old_logp = (
            micro.sampler_logp if cfg.ratio_baseline == "sampler" else jax.lax.stop_gradient(stats.logp)
        )
        ref_logp = micro.ref_logp
        if ref_logp is None and ref_model is not None:
            ref_logp = jax.lax.stop_gradient(
                token_stats(
                    ref_model, micro.tokens, self.temperature, self.vocab_chunk, self.unroll_layers, micro.shared
                ).logp
            )
        entropy = stats.entropy if cfg.entropy_coef != 0 else jax.lax.stop_gradient(stats.entropy)
        return policy_loss(
            stats.logp,
            old_logp,
            micro.sampler_logp,
            micro.advantages,
            micro.loss_mask,
            cfg,
            normalizer,
            ref_logp=ref_logp,
            entropy=entropy,
        )

    def _grads_impl(self, params, static, batch: TrainBatch, ref_model):
        """(grads, metrics) of the whole batch, accumulated over micro-batches that share its normalizer."""
        normalizer = batch_normalizer(batch.loss_mask, self.loss_cfg.fixed_budget)
        grad_fn = jax.grad(self._micro_loss, has_aux=True)
        n_micro = self.batch_size // self.micro_batch_size
        if n_micro == 1:
            return grad_fn(params, static, batch, normalizer, ref_model)

        # Micro-batch k = rows k, k + n_micro, k + 2 n_micro, ...: with rows split into contiguous blocks over
        # data x fsdp, every device keeps micro_batch_size / (data x fsdp) of its own rows in each micro-batch.
        micro_batches = jax.tree.map(
            lambda x: jax.lax.with_sharding_constraint(
                jnp.swapaxes(x.reshape((self.micro_batch_size, n_micro) + x.shape[1:]), 0, 1),
                meshes.batch_sharding(self.mesh, x.ndim + 1, leading=1),
            ),
            batch,
        )

        def accumulate(carry, micro):
            grads_sum, metrics_sum = carry
            grads, metrics = grad_fn(params, static, micro, normalizer, ref_model)
            return (
                jax.tree.map(jnp.add, grads_sum, grads),
                jax.tree.map(jnp.add, metrics_sum, metrics),
            ), None

        first = jax.tree.map(lambda x: x[0], micro_batches)
        metrics_shape = jax.eval_shape(lambda m: grad_fn(params, static, m, normalizer, ref_model)[1], first)
        zeros = (
            jax.tree.map(jnp.zeros_like, params),
            jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), metrics_shape),
        )
        (grads, metrics), _ = jax.lax.scan(accumulate, zeros, micro_batches)
        return grads, metrics

    def _grads_entry(self, model, batch: TrainBatch, ref_model):
        params, static = eqx.partition(model, eqx.is_inexact_array)
        grads, metrics = self._grads_impl(params, static, batch, ref_model)
        grads = meshes.shard_params(grads, self.mesh)  # reduce-scattered into the parameters' own layout
        metrics = dict(metrics)
        metrics["train/tokens"] = batch.loss_mask.sum()
        metrics["train/sequences"] = (batch.loss_mask.sum(-1) > 0).sum().astype(jnp.float32)
        return grads, metrics

    def _step_entry(self, state: TrainerState, batch: TrainBatch, ref_model):
        """(state after one AdamW step, metrics); with a non-finite loss the update is skipped inside the program
        and `state` comes back unchanged (train_step then raises)."""
        self.traces += 1  # python side effect: runs only while tracing
        grads, metrics = self._grads_entry(state.model, batch, ref_model)
        finite = jnp.isfinite(metrics["loss/total"])
        updated, update_metrics = self._apply_impl(state, grads)
        # A per-leaf select, not lax.cond: a cond branch that returns the input state made XLA copy every parameter
        # and both Adam moments each step (the inputs are not donated); the select fuses into the AdamW update.
        state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, state)
        update_metrics = {name: jnp.where(finite, value, jnp.nan) for name, value in update_metrics.items()}
        return state, {**metrics, **update_metrics}

    def _apply_impl(self, state: TrainerState, grads):
        """AdamW update of the trainable leaves; returns (new state, optimizer metrics)."""
        params, static = eqx.partition(state.model, eqx.is_inexact_array)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, params)
        new_params = optax.apply_updates(params, updates)
        metrics = {
            "train/grad_norm": optax.global_norm(grads),
            "train/update_norm": optax.global_norm(updates),
            "train/lr": self.schedule(schedule_count(state.opt_state)),
        }
        return TrainerState(eqx.combine(new_params, static), opt_state, state.step + 1, state.key), metrics

    def check_batch(self, batch: TrainBatch) -> None:
        """Shape/dtype checks with messages naming the field (before jit, so errors are readable)."""
        B, S = batch.tokens.shape
        if B != self.batch_size:
            raise ValueError(
                f"batch has {B} rows; the trainer is fixed to train.batch_size={self.batch_size} "
                "(use pad_train_batch)"
            )
        if S > self.model_cfg.max_seq_len:
            raise ValueError(
                f"batch sequence length {S} exceeds model.max_seq_len={self.model_cfg.max_seq_len}"
            )
        for name in ("loss_mask", "sampler_logp", "ref_logp"):
            value = getattr(batch, name)
            if value is not None and value.shape != (B, S):
                raise ValueError(f"TrainBatch.{name} has shape {value.shape}, expected {(B, S)}")
        if batch.advantages.shape != (B,):
            raise ValueError(f"TrainBatch.advantages has shape {batch.advantages.shape}, expected {(B,)}")
        if batch.shared is not None:
            self._check_shared(batch.shared, (B, S))
        if not jnp.issubdtype(batch.tokens.dtype, jnp.integer):
            raise ValueError(f"TrainBatch.tokens must be integers, got {batch.tokens.dtype}")
        if self.loss_cfg.kl.coef > 0 and batch.ref_logp is None and self.reference_model is None:
            raise ValueError(
                f"loss.kl.coef={self.loss_cfg.kl.coef} > 0 needs TrainBatch.ref_logp or a reference_model"
            )

    def _check_shared(self, shared: SharedPromptRows, batch_shape: tuple[int, int]) -> None:
        if self.batch_size // self.micro_batch_size > 1:
            raise ValueError(
                f"shared-prompt rows (hardware.trainer_shared_prompts) run the whole batch in one pass; "
                f"train.micro_batch_size={self.micro_batch_size} splits it; allowed: one of the two"
            )
        G, P = np.shape(shared.prompts_GP)
        if np.shape(shared.prompt_lens_G) != (G,) or np.shape(shared.responses_GNT)[0] != G:
            raise ValueError(
                f"SharedPromptRows: prompt_lens_G {np.shape(shared.prompt_lens_G)} and responses_GNT "
                f"{np.shape(shared.responses_GNT)} must have the {G} prompts of prompts_GP"
            )
        if np.shape(shared.source_BL) != batch_shape:
            raise ValueError(f"SharedPromptRows.source_BL has shape {np.shape(shared.source_BL)}, expected {batch_shape}")

    def _shared_on_mesh(self, shared: SharedPromptRows | None) -> SharedPromptRows | None:
        """int32 arrays, prompts padded to a multiple of data x fsdp so every device takes whole groups."""
        if shared is None:
            return None
        G, P = np.shape(shared.prompts_GP)
        extra = -G % meshes.batch_split(self.mesh)

        def grow(x):  # padding groups: no prompt tokens, never read
            x = jnp.asarray(x, jnp.int32)
            return jnp.pad(x, ((0, extra),) + ((0, 0),) * (x.ndim - 1))

        source = jnp.asarray(shared.source_BL, jnp.int32)
        source = jnp.where(source >= G * P, source + extra * P, source)  # the responses come after more prompts
        return SharedPromptRows(grow(shared.prompts_GP), grow(shared.prompt_lens_G), grow(shared.responses_GNT), source)

    def _prepare(self, batch: TrainBatch) -> tuple[TrainBatch, Any]:
        self.check_batch(batch)
        batch = TrainBatch(
            tokens=jnp.asarray(batch.tokens, jnp.int32),
            loss_mask=jnp.asarray(batch.loss_mask, jnp.float32),
            advantages=jnp.asarray(batch.advantages, jnp.float32),
            sampler_logp=jnp.asarray(batch.sampler_logp, jnp.float32),
            ref_logp=None if batch.ref_logp is None else jnp.asarray(batch.ref_logp, jnp.float32),
            shared=self._shared_on_mesh(batch.shared),
        )
        ref_model = self.reference_model if (self.loss_cfg.kl.coef > 0 and batch.ref_logp is None) else None
        return self.place_batch(batch), ref_model

    def grads(self, model: Any, batch: TrainBatch) -> tuple[Any, dict[str, jax.Array]]:
        """(gradients of the loss w.r.t. the trainable leaves, metrics) without updating anything."""
        batch, ref_model = self._prepare(batch)
        with meshes.compute_scope(self.mesh):
            return self._grads(meshes.shard_params(model, self.mesh), batch, ref_model)

    def train_step(self, state: TrainerState, batch: TrainBatch) -> tuple[TrainerState, dict[str, float]]:
        """One optimizer step; metrics are python floats (loss/* from the objective, train/* from here).

        A non-finite loss raises FloatingPointError BEFORE the update, so `state` is still the last good one.
        """
        batch, ref_model = self._prepare(batch)
        if self._step is None:
            # out_shardings: every new state is placed exactly as the first one was, so the next call finds its
            # input where it expects it (a sharding constraint would let XLA rewrite e.g. P('fsdp') on a size-1
            # axis as P(), a different jit cache key: one recompile per step)
            placement = jax.tree.map(lambda x: x.sharding, state)
            self._step = jax.jit(self._step_entry, out_shardings=(placement, meshes.replicated(self.mesh)))
        with meshes.compute_scope(self.mesh):
            new_state, metrics = self._step(state, batch, ref_model)
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if not math.isfinite(metrics["loss/total"]):
            raise FloatingPointError(
                f"non-finite loss {metrics['loss/total']} at step {int(state.step) + 1}; update not applied"
            )
        return new_state, metrics
