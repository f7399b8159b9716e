"""Replay buffer: staleness bound, capacity, reuse, env balance."""

from __future__ import annotations

from rollout_helpers import group

from marin_rl.rollouts import staleness
from marin_rl.runtime.replay_buffer import ReplayBuffer


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


def test_a_batch_never_draws_the_same_group_twice():
    """With max_reuse > 1 a used group stays in front; the extra draws of one batch must skip it."""
    buf = ReplayBuffer(capacity=10, max_reuse=3, max_staleness=10)
    first, second = group(rewards=(1.0, 0.0)), group(rewards=(0.0, 1.0))
    buf.add([first, second])
    drawn = buf.sample(1, 0, timeout_s=0)
    assert drawn == [first]
    assert buf.sample(1, 0, timeout_s=0, exclude=drawn) == [second]
    assert buf.sample(2, 0, timeout_s=0, exclude=drawn) is None  # only one group is not drawn yet


def test_a_group_pickles_to_the_same_rollouts():
    """Ray pickles every shipment of groups; the packed form must give back every field exactly (dtypes, values,
    an empty response, per-rollout prompts and lengths)."""
    import pickle

    import numpy as np
    from rollout_helpers import rollout

    from marin_rl.rollouts import RolloutGroup

    sent = RolloutGroup((
        rollout(versions=(3, 4, 4), reward=1.0, prompt=(1, 2, 3), pid="p1"),
        rollout(versions=(), reward=0.0, prompt=(7,), truncated=True, pid="p2"),
        rollout(versions=(5,), reward=0.5, prompt=(8, 9), pid="p3"),
    ))
    got = pickle.loads(pickle.dumps(sent))
    assert len(got) == len(sent)
    for a, b in zip(sent.rollouts, got.rollouts, strict=True):
        assert (a.problem_id, a.env, a.reward, a.correct, a.format_ok, a.truncated) == (
            b.problem_id, b.env, b.reward, b.correct, b.format_ok, b.truncated)
        for name in ("prompt_tokens", "response_tokens", "sampler_logp", "versions"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (got.min_version, got.rollouts[0].spans_versions) == (sent.min_version, True)
