"""Replay buffer and rollout packing: staleness bound, capacity, reuse, env balance, batch layout."""

from __future__ import annotations

import numpy as np
import pytest

from marin_rl.rollouts import Rollout, RolloutGroup, make_group, pack_groups, staleness
from marin_rl.runtime.replay_buffer import ReplayBuffer


def rollout(env="a", versions=(0, 0), reward=1.0, prompt=(1, 2), truncated=False, pid="p"):
    n = len(versions)
    return Rollout(
        problem_id=pid, env=env, prompt_tokens=np.array(prompt, np.int32),
        response_tokens=np.arange(10, 10 + n, dtype=np.int32), sampler_logp=np.full(n, -0.5, np.float32),
        versions=np.array(versions, np.int32), reward=reward, correct=reward > 0, truncated=truncated,
    )


def group(env="a", versions=(0, 0), rewards=(1.0, 0.0)) -> RolloutGroup:
    return make_group([rollout(env, versions, r) for r in rewards], "dr_grpo")


def test_group_advantages_and_zero_variance():
    g = group(rewards=(1.0, 0.0, 0.0, 1.0))
    np.testing.assert_allclose(g.advantages, [0.5, -0.5, -0.5, 0.5])
    assert not g.is_zero_variance
    flat = group(rewards=(1.0, 1.0))
    assert flat.is_zero_variance and np.all(flat.advantages == 0)


def test_staleness_uses_the_oldest_token():
    g = group(versions=(3, 5))
    assert g.min_version == 3 and g.rollouts[0].spans_versions
    assert staleness(g, 5) == 2


def test_stale_groups_are_dropped_and_counted():
    buf = ReplayBuffer(capacity=100, max_reuse=1, max_staleness=1)
    buf.add([group(versions=(0, 1)), group(versions=(1, 2)), group(versions=(2, 2))])
    picked = buf.sample(2, trainer_version=2, timeout_s=0)
    assert picked is not None and len(picked) == 2
    assert all(staleness(g, 2) <= 1 for g in picked)
    assert buf.stats.dropped_stale == 1
    assert max(buf.stats.last_staleness) == 1


def test_sample_returns_none_when_short_and_waits_for_timeout():
    buf = ReplayBuffer(capacity=10, max_reuse=1, max_staleness=0)
    buf.add([group()])
    assert buf.sample(2, trainer_version=0, timeout_s=0.05) is None
    assert len(buf) == 1  # nothing lost by a failed sample


def test_capacity_evicts_oldest_first():
    buf = ReplayBuffer(capacity=2, max_reuse=1, max_staleness=10)
    buf.add([group(versions=(0, 0)), group(versions=(1, 1)), group(versions=(2, 2))])
    assert len(buf) == 2 and buf.stats.evicted == 1
    picked = buf.sample(2, trainer_version=2, timeout_s=0)
    assert sorted(g.min_version for g in picked) == [1, 2]


def test_max_reuse_counts_uses():
    buf = ReplayBuffer(capacity=10, max_reuse=2, max_staleness=10)
    buf.add([group()])
    assert buf.sample(1, 0, timeout_s=0) is not None
    assert buf.sample(1, 0, timeout_s=0) is not None
    assert buf.sample(1, 0, timeout_s=0) is None


def test_sampling_is_balanced_across_envs():
    buf = ReplayBuffer(capacity=100, max_reuse=1, max_staleness=10)
    buf.add([group("a") for _ in range(6)] + [group("b") for _ in range(2)])
    picked = buf.sample(4, 0, timeout_s=0)
    assert sorted(g.env for g in picked) == ["a", "a", "b", "b"]


def test_pack_groups_layout_and_truncation_mask():
    g = make_group([rollout(versions=(0, 0, 0), prompt=(1, 2)), rollout(versions=(0,), truncated=True)], "rloo")
    packed = pack_groups([g], seq_len=8, pad_id=0, mask_truncated=True)
    assert packed.tokens.shape == (2, 8)
    np.testing.assert_array_equal(packed.tokens[0], [1, 2, 10, 11, 12, 0, 0, 0])
    np.testing.assert_array_equal(packed.loss_mask[0], [0, 0, 1, 1, 1, 0, 0, 0])
    assert packed.loss_mask[1].sum() == 0  # truncated answer masked out
    np.testing.assert_allclose(packed.sampler_logp[0, 2:5], -0.5)
    with pytest.raises(ValueError, match="max_seq_len"):
        pack_groups([g], seq_len=4, pad_id=0)
