"""Trainer: schedule, gradient accumulation == full batch, no recompiles, learning signal, batch checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_policy import BATCH, MODEL, OPTIMIZER, SEQ, arithmetic_batch, tiny_model, tiny_trainer

from marin_rl.config.spec import OptimizerConfig
from marin_rl.training.trainer import TrainBatch, lr_schedule, make_optimizer, pad_train_batch


def test_lr_schedule_warmup_then_decay_to_floor():
    def lrs(kind):
        cfg = OptimizerConfig(lr=1.0, schedule=kind, warmup_steps=4, min_lr_ratio=0.1)
        return np.asarray(lr_schedule(cfg, total_steps=14)(jnp.arange(16)))  # elementwise in the step

    constant, linear, cosine = lrs("constant"), lrs("linear"), lrs("cosine")
    for lr in (constant, linear, cosine):
        np.testing.assert_allclose(lr[:4], [0.25, 0.5, 0.75, 1.0])  # warmup reaches the peak, never 0
    np.testing.assert_allclose(constant[4:], 1.0)
    np.testing.assert_allclose(linear[[4, 9, 14, 15]], [1.0, 0.55, 0.1, 0.1], atol=1e-6)
    np.testing.assert_allclose(cosine[[4, 9, 14]], [1.0, 0.55, 0.1], atol=1e-6)
    assert np.all(np.diff(cosine[4:]) <= 1e-7) and cosine[6] > linear[6]  # cosine decays slower at first


def test_optimizer_clips_gradients_and_decays_only_matrices():
    cfg = OptimizerConfig(lr=0.1, weight_decay=0.5, max_grad_norm=1.0, beta1=0.0, beta2=0.0, eps=1e-12)
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones((2,))}
    opt = make_optimizer(cfg, total_steps=10)
    state = opt.init(params)
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(opt.update)(zero, state, params)
    np.testing.assert_allclose(updates["w"], -0.1 * 0.5)  # decoupled weight decay on the matrix
    np.testing.assert_allclose(updates["b"], 0.0)  # not on the vector
    clipped, _ = jax.jit(make_optimizer(cfg.model_copy(update={"weight_decay": 0.0}), 10).update)(
        {"w": jnp.full((2, 2), 100.0), "b": jnp.zeros(2)}, state, params
    )
    np.testing.assert_allclose(clipped["w"], -0.1, rtol=1e-5)  # Adam with b=0 -> sign step after clipping


def test_gradient_accumulation_equals_full_batch():
    model, tokenizer, _ = tiny_model()
    batch = arithmetic_batch(tokenizer, seed=1)
    full_grads, full_metrics = tiny_trainer(None).grads(model, batch)
    micro_grads, micro_metrics = tiny_trainer(2).grads(model, batch)
    for a, b in zip(jax.tree.leaves(full_grads), jax.tree.leaves(micro_grads), strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=1e-6 * float(jnp.abs(a).max() + 1e-12))
    assert full_metrics.keys() == micro_metrics.keys()
    for key in full_metrics:
        np.testing.assert_allclose(micro_metrics[key], full_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert float(full_metrics["loss/total"]) != 0.0


def test_train_steps_compile_once_and_move_logprobs_along_advantages():
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)  # the same compiled step as test_checkpoint.py
    batch = arithmetic_batch(tokenizer, seed=2)
    on_policy = trainer.logprobs(model, batch.tokens)
    batch = TrainBatch(batch.tokens, batch.loss_mask, batch.advantages, on_policy)
    state = trainer.init_state(model)
    for step in range(4):
        state, metrics = trainer.train_step(state, batch)
        assert metrics["train/lr"] == pytest.approx(float(trainer.schedule(step)))
    assert trainer.traces == 1  # fixed shapes: one compile for all steps
    assert int(state.step) == 4
    assert metrics["train/tokens"] == float(batch.loss_mask.sum())
    assert metrics["train/grad_norm"] > 0 and np.isfinite(metrics["loss/total"])

    after = trainer.logprobs(state.model, batch.tokens)
    mask = np.asarray(batch.loss_mask)
    delta = ((np.asarray(after) - np.asarray(on_policy)) * mask).sum(1) / mask.sum(1)
    adv = np.asarray(batch.advantages)
    assert delta[adv > 0].mean() > 0 > delta[adv < 0].mean()  # PPO/GRPO pushes up rewarded answers only


def test_batch_shape_errors_and_padding():
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)
    state = trainer.init_state(model)
    batch = arithmetic_batch(tokenizer, seed=3)
    half = jax.tree.map(lambda x: x[: BATCH // 2, :10] if x.ndim == 2 else x[: BATCH // 2], batch)
    with pytest.raises(ValueError, match="train.batch_size"):
        trainer.train_step(state, half)
    padded = pad_train_batch(half, BATCH, SEQ, pad_id=tokenizer.pad_token_id)
    assert padded.tokens.shape == (BATCH, SEQ) and float(padded.loss_mask[BATCH // 2 :].sum()) == 0.0
    np.testing.assert_array_equal(padded.tokens[: BATCH // 2, :10], half.tokens)
    with pytest.raises(ValueError, match="does not fit"):
        pad_train_batch(batch, BATCH // 2, SEQ)
    too_long = pad_train_batch(batch, BATCH, MODEL.max_seq_len + 1)
    with pytest.raises(ValueError, match="max_seq_len"):
        trainer.train_step(state, too_long)
    bad_adv = TrainBatch(batch.tokens, batch.loss_mask, batch.advantages[:, None], batch.sampler_logp)
    with pytest.raises(ValueError, match="advantages"):
        trainer.train_step(state, bad_adv)


def test_non_finite_loss_raises_before_the_update():
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)
    state = trainer.init_state(model)
    batch = arithmetic_batch(tokenizer, seed=4)
    poisoned = TrainBatch(
        batch.tokens, batch.loss_mask, batch.advantages, batch.sampler_logp.at[0].set(jnp.nan)
    )
    with pytest.raises(FloatingPointError, match="not applied"):
        trainer.train_step(state, poisoned)
    assert int(state.step) == 0  # the caller's state is untouched and still usable
    state, metrics = trainer.train_step(state, batch)
    assert np.isfinite(metrics["loss/total"]) and int(state.step) == 1


def test_logged_lr_is_the_applied_one_after_a_skipped_step():
    """A skipped run step bumps TrainerState.step without an update; the lr schedule follows the optimizer's own
    update count, and so does the logged lr (OPTIMIZER: 2 warmup steps, so lr(0) = peak / 2, lr(1) = peak)."""
    import equinox as eqx

    from marin_rl.training.trainer import schedule_count

    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)
    state = trainer.init_state(model)
    skipped = eqx.tree_at(lambda st: st.step, state, state.step + 1)  # what TrainerActor._skip_step does
    state, metrics = trainer.train_step(skipped, arithmetic_batch(tokenizer, seed=3))
    assert int(schedule_count(state.opt_state)) == 1 and int(state.step) == 2
    assert metrics["train/lr"] == pytest.approx(float(trainer.schedule(0))) == OPTIMIZER.lr / 2
    assert float(trainer.schedule(1)) == pytest.approx(OPTIMIZER.lr)  # what the run step would have logged


def test_train_step_metrics_describe_the_batch():
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)
    batch = arithmetic_batch(tokenizer, seed=4)
    _, metrics = trainer.train_step(trainer.init_state(model), batch)
    mask, advantages = np.asarray(batch.loss_mask), np.asarray(batch.advantages)
    assert metrics["train/tokens"] == mask.sum()
    assert metrics["train/sequences"] == BATCH  # every row has response tokens
    # token-weighted mean of the per-answer advantages (+1 right, -1 wrong), as the loss sees them
    assert metrics["loss/advantage_mean"] == pytest.approx((mask.sum(1) * advantages).sum() / mask.sum(), abs=1e-6)
    assert metrics["train/lr"] == pytest.approx(float(trainer.schedule(0)))
    # the sampler log-probs are a uniform sampler's: the gap to the trainer's log-probs is far from 0
    assert metrics["loss/sampler_trainer_logp_gap"] > 0.1
