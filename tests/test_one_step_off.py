"""rollout.mode=one_step_off without Ray: the schedule, the coordinator's two packets and any-version extra rounds,
the buffer's newest-version filter, and the spec's rules."""

from __future__ import annotations

import pytest
from rollout_helpers import group
from spec_helpers import compose_spec

from marin_rl.config.spec import SpecError
from marin_rl.runtime.coordinator import Coordinator
from marin_rl.runtime.one_step_off import (
    VERSION_LAG,
    batch_weights_version,
    next_lagged_round,
    start_version,
)
from marin_rl.runtime.replay_buffer import ReplayBuffer
from marin_rl.runtime.weight_sync import WeightPacket


@pytest.mark.parametrize("base", [0, 7])  # a fresh run, and one resumed at version 7
def test_each_batch_is_sampled_one_step_behind_and_started_before_the_step_before_it_trains(base):
    steps = range(base + 1, base + 8)
    assert [batch_weights_version(s, base) for s in steps] == [base, base, *range(base + 1, base + 6)]
    assert [start_version(s, base) for s in steps] == [base, base + 1, *range(base + 1, base + 6)]
    for s in steps:
        # sampled while the trainer trains step s - 1 (weights s - 2 out, s - 1 not yet), from the third step on
        assert start_version(s, base) <= s - 1
        if s >= base + 3:
            assert start_version(s, base) == s - 2
        assert s - 1 - batch_weights_version(s, base) == (0 if s == base + 1 else 1)  # staleness when trained


def round_for(next_step, newest, extra=None, base=0, last_step=10):
    return next_lagged_round(next_step=next_step, newest_version=newest, base_version=base, last_step=last_step,
                             extra=extra, worker_id=1, incarnation=2, groups_per_round=4)


def test_a_worker_samples_its_share_once_the_weights_are_out_and_extra_rounds_first():
    first = round_for(1, newest=0)
    assert (first.n_groups, first.stream, first.weights_version, first.step) == (4, ("one_step_off", 1, 2, 1), 0, 1)
    assert round_for(2, newest=0) is None  # the batch of step 2 (also weights 0) waits for step 1 to train
    assert round_for(2, newest=1).weights_version == 0
    assert round_for(4, newest=1) is None and round_for(4, newest=2).weights_version == 2
    extra = round_for(4, newest=2, extra=(1, 3, 5))  # the trainer waits on it: before the next share
    assert (extra.n_groups, extra.stream, extra.weights_version, extra.step) == (3, ("extra", 1, 5), 1, None)
    assert round_for(11, newest=9) is None  # past train.steps: nothing to sample


def test_the_coordinator_serves_the_newest_two_versions_by_number():
    coordinator = Coordinator(lag=VERSION_LAG["one_step_off"])
    for version in (3, 4, 5):
        coordinator.publish_weights(WeightPacket(version, f"c{version}", 0))
    assert coordinator.versions() == (3, 5)
    assert coordinator.weights_at(5).checksum == "c5" and coordinator.weights_at(4).checksum == "c4"
    assert coordinator.weights_at(3) is None  # two are kept
    assert coordinator.weights_newer_than(4).version == 5  # the sync / in-flight path is unchanged


def test_extra_rounds_of_the_previous_version_are_claimed_and_requeued_with_lag_one():
    coordinator = Coordinator(lag=1)
    coordinator.publish_weights(WeightPacket(4, "x", 0))
    coordinator.publish_weights(WeightPacket(5, "x", 0))
    coordinator.register_worker(0)
    coordinator.request_extra_groups(4, 3)  # the trainer at v5 fills the batch of step 6 (weights 4)
    coordinator.request_extra_groups(4, 2)
    assert coordinator.claim_extra_round(worker_id=0) == (4, 3, 0)
    assert coordinator.register_worker(0) == 1  # died inside that round: it goes back to the queue
    assert coordinator.claim_extra_round(worker_id=1) == (4, 2, 1)
    assert coordinator.claim_extra_round(worker_id=1) == (4, 3, 0)
    assert coordinator.claim_extra_round(worker_id=1) is None
    coordinator.request_extra_groups(3, 1)
    coordinator.publish_weights(WeightPacket(6, "x", 0))  # weights 3 and 4 fed steps that are done: moot
    assert coordinator.claim_extra_round(worker_id=0) is None


def test_the_buffer_leaves_groups_newer_than_the_batch_weights_for_the_next_step():
    buf = ReplayBuffer(capacity=10, max_reuse=1, max_staleness=1)
    next_batch, this_batch = group(versions=(5, 5)), group(versions=(4, 4))
    buf.add([next_batch, this_batch])  # the next step's batch may arrive first (another worker)
    assert buf.sample(1, trainer_version=5, timeout_s=0, newest_version=4) == [this_batch]
    assert buf.sample(1, trainer_version=5, timeout_s=0.01, newest_version=4) is None
    assert buf.sample(1, trainer_version=6, timeout_s=0, newest_version=5) == [next_batch]


def test_one_step_off_validates_with_the_default_staleness_bound():
    spec = compose_spec(["recipe=quickstart", "rollout.mode=one_step_off"])
    assert spec.rollout.mode == "one_step_off" and spec.rollout.max_staleness == 1


@pytest.mark.parametrize(
    "overrides,needles",
    [
        (["rollout.max_staleness=0"], ["rollout.max_staleness=0", "rollout.mode=one_step_off", "max_staleness >= 1"]),
        (["rollout.replay.max_reuse=2"], ["rollout.replay.max_reuse=2", "rollout.mode=one_step_off", "max_reuse=1"]),
        (["rollout.kv_on_swap=keep"], ["rollout.kv_on_swap='keep'", "rollout.mode=one_step_off", "recompute"]),
    ],
)
def test_one_step_off_refuses_settings_it_cannot_honour(overrides, needles):
    with pytest.raises(SpecError) as err:
        compose_spec(["rollout.mode=one_step_off", *overrides])
    for needle in needles:
        assert needle in str(err.value), (needle, str(err.value))
