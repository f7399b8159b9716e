"""Trainer-side batch preparation (shaping -> advantages -> filtering) and packing, against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from rollout_helpers import group, rollout

from marin_rl.config.spec import TrainConfig
from marin_rl.objectives.config import DynamicSamplingConfig, LossConfig, OverlongConfig
from marin_rl.training.batch import length_bucket, pack_rollouts
from marin_rl.training.data_processing import prepare_batch, shaped_rewards_NG
from marin_rl.training.trainer import step_batch

DR_GRPO = LossConfig(name="t", advantage="dr_grpo")


def test_advantages_then_zero_variance_filtering_by_hand():
    groups = [group(rewards=(1, 0, 0, 1)), group(rewards=(1, 1, 1, 1)), group(rewards=(0, 0, 0, 1))]
    prepared = prepare_batch(groups, DR_GRPO, max_new_tokens=32, target_groups=2)
    assert prepared.groups == [groups[0], groups[2]]  # the all-correct group carries no signal: dropped
    # dr_grpo: A = r - mean(r) within each group
    np.testing.assert_allclose(prepared.advantages_NG, [[0.5, -0.5, -0.5, 0.5], [-0.25, -0.25, -0.25, 0.75]])
    np.testing.assert_allclose(prepared.advantages_B, [0.5, -0.5, -0.5, 0.5, -0.25, -0.25, -0.25, 0.75])
    m = prepared.metrics
    assert (m["filter/kept_groups"], m["filter/dropped_groups"], m["filter/sampling_rounds"]) == (2, 1, 1)
    assert m["filter/zero_variance_frac"] == pytest.approx(1 / 3)
    assert m["advantage/abs_mean"] == pytest.approx((4 * 0.5 + 3 * 0.25 + 0.75) / 8)
    assert m["reward/shaped_mean"] == pytest.approx(7 / 12)


def test_batch_is_capped_at_target_groups_and_filtering_can_be_off():
    groups = [group(rewards=(1, 0)), group(rewards=(0, 1)), group(rewards=(1, 1))]
    assert prepare_batch(groups, DR_GRPO, 32, target_groups=1).groups == [groups[0]]
    keep_all = DR_GRPO.model_copy(update={"filter_zero_variance": False})
    prepared = prepare_batch(groups, keep_all, 32, target_groups=3)
    assert len(prepared.groups) == 3
    np.testing.assert_array_equal(prepared.advantages_NG[2], [0.0, 0.0])  # kept, but no gradient


def test_overlong_shaping_comes_before_advantages_and_filtering():
    # all four answers correct (reward 1); lengths 2, 8, 10, 12 tokens with L_max = 10, L_buf = 4, onset 6:
    # penalties 0, -(8-6)/4 = -0.5, -1, -1  ->  shaped rewards 1, 0.5, 0, 0
    cfg = DR_GRPO.model_copy(update={"overlong": OverlongConfig(penalty=True, buffer_len=4, factor=1.0)})
    g = group(rewards=(1, 1, 1, 1), lengths=(2, 8, 10, 12))
    np.testing.assert_allclose(shaped_rewards_NG([g], cfg, max_new_tokens=10), [[1.0, 0.5, 0.0, 0.0]])
    prepared = prepare_batch([g], cfg, max_new_tokens=10, target_groups=1)
    assert prepared.groups == [g]  # shaping gave the group variance, so it is not filtered
    np.testing.assert_allclose(prepared.advantages_NG, [[0.625, 0.125, -0.375, -0.375]])
    # without the penalty the same group is all-equal and dropped
    assert prepare_batch([g], DR_GRPO, max_new_tokens=10, target_groups=1).groups == []


def test_dynamic_sampling_accounting_after_a_short_round():
    cfg = DR_GRPO.model_copy(update={"dynamic_sampling": DynamicSamplingConfig(enabled=True, max_extra_rounds=1)})
    groups = [group(rewards=(1, 0)), group(rewards=(1, 1)), group(rewards=(0, 0)), group(rewards=(1, 1))]
    prepared = prepare_batch(groups, cfg, 32, target_groups=4)
    assert prepared.accounting.needs_more(cfg.dynamic_sampling)
    assert prepared.accounting.prompts_for_next_round() == 4  # 3 missing at a keep rate of 1/4: one full round
    second = prepare_batch(groups + [group(rewards=(0, 1))] * 3, cfg, 32, target_groups=4, rounds=2)
    assert len(second.groups) == 4 and not second.accounting.needs_more(cfg.dynamic_sampling)
    assert second.metrics["filter/sampling_rounds"] == 2 and second.metrics["filter/batch_fill"] == 1.0


def test_empty_draw_gives_an_empty_batch():
    prepared = prepare_batch([], DR_GRPO, 32, target_groups=2)
    assert prepared.groups == [] and prepared.metrics["filter/batch_fill"] == 0.0


def test_pack_rollouts_layout_and_truncation_mask():
    rollouts = [rollout(versions=(0, 0, 0), prompt=(1, 2)), rollout(versions=(0,), truncated=True)]
    packed = pack_rollouts(rollouts, np.array([1.0, -1.0]), seq_len=8, pad_id=0, drop_truncated=True)
    assert packed.tokens_BS.shape == (2, 8)
    np.testing.assert_array_equal(packed.tokens_BS[0], [1, 2, 10, 11, 12, 0, 0, 0])
    np.testing.assert_array_equal(packed.loss_mask_BS[0], [0, 0, 1, 1, 1, 0, 0, 0])
    assert packed.loss_mask_BS[1].sum() == 0  # truncated answer masked out
    np.testing.assert_allclose(packed.sampler_logp_BS[0, 2:5], -0.5)
    np.testing.assert_allclose(packed.advantages_B, [1.0, -1.0])
    kept = pack_rollouts(rollouts, np.zeros(2), seq_len=8, pad_id=0)
    assert kept.loss_mask_BS[1].sum() == 1  # without drop_truncated it counts
    with pytest.raises(ValueError, match="max_seq_len"):
        pack_rollouts(rollouts, np.zeros(2), seq_len=4, pad_id=0)


@pytest.mark.parametrize(
    "longest, bucket", [(1, 32), (32, 32), (33, 48), (45, 48), (49, 64), (65, 96), (100, 128), (129, 192), (300, 256)]
)
def test_length_bucket(longest, bucket):
    assert length_bucket(longest, max_seq_len=256) == bucket
    # the sampler's KV cache series: from 64 (inference/sampler.py MIN_CACHE_BUCKET)
    assert length_bucket(longest, max_seq_len=256, minimum=64) == max(bucket, 64)


@pytest.mark.parametrize("per_octave, buckets", [
    (1, [32, 64, 64, 64, 128, 128, 128, 256, 256]),
    (2, [32, 48, 48, 64, 96, 96, 128, 192, 256]),
    (4, [32, 40, 48, 56, 80, 96, 128, 160, 256]),
    (8, [32, 36, 48, 56, 72, 96, 128, 144, 256]),
])
def test_length_buckets_per_octave(per_octave, buckets):
    lengths = [30, 33, 45, 53, 65, 90, 127, 129, 300]
    assert [length_bucket(n, 256, per_octave=per_octave) for n in lengths] == buckets


@pytest.mark.parametrize("per_octave, padded", [(1, 64), (2, 64), (4, 56), (8, 56)])
def test_a_step_runs_at_the_length_bucket_of_train_length_buckets_per_octave(per_octave, padded):
    """The trainer actor's step arrays (training/trainer.py step_batch): the longest row, 2 + 51 = 53 tokens, sets
    the padded length through the config key; rows are padded up to train.batch_size."""
    train = TrainConfig(batch_size=4, steps=1, length_buckets_per_octave=per_octave)
    rollouts = [rollout(length=51), rollout(length=20)]
    batch, metrics = step_batch(rollouts, np.array([1.0, -1.0]), train, max_seq_len=128, pad_id=0,
                              filter_truncated=False)
    assert metrics == {
        "train/longest_len": 53, "train/padded_len": padded, "train/padded_tokens": 4 * padded,
        "throughput/trained_tokens": 71.0,
    }
    assert batch.tokens.shape == batch.loss_mask.shape == (4, padded)
    assert float(np.sum(batch.loss_mask)) == 71


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo"])
def test_host_preparation_runs_in_numpy_and_equals_the_jax_formulas(advantage):
    """The trainer prepares batches of varying group counts on the host in NumPy (eager JAX would compile every op
    anew at every new count); the same functions given JAX arrays compute the same values."""
    import jax.numpy as jnp

    from marin_rl.objectives import apply_overlong_penalty, batch_group_advantages

    cfg = LossConfig(name="t", advantage=advantage, overlong=OverlongConfig(penalty=True, buffer_len=4))
    rng = np.random.default_rng(0)
    for n_groups in (3, 5, 7):
        groups = [group(rewards=tuple(rng.integers(0, 2, 4)), lengths=tuple(rng.integers(1, 12, 4)))
                  for _ in range(n_groups)]
        prepared = prepare_batch(groups, cfg, max_new_tokens=10, target_groups=n_groups)
        assert type(prepared.advantages_NG) is np.ndarray
        rewards_NG = shaped_rewards_NG(groups, cfg, max_new_tokens=10)
        assert type(rewards_NG) is np.ndarray
        lengths_NG = np.array([[len(r.response_tokens) for r in g.rollouts] for g in groups])
        plain_NG = np.stack([g.rewards_G for g in groups])
        in_jax = apply_overlong_penalty(jnp.asarray(plain_NG), jnp.asarray(lengths_NG), 10, cfg.overlong)
        np.testing.assert_allclose(rewards_NG, np.asarray(in_jax), atol=1e-6)
        np.testing.assert_allclose(batch_group_advantages(rewards_NG, advantage),
                                   np.asarray(batch_group_advantages(jnp.asarray(rewards_NG), advantage)), atol=1e-6)
