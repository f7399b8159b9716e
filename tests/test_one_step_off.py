"""rollout.mode=one_step_off without Ray: the schedule, the coordinator's two packets, pipeline gate and any-version
extra rounds, and the spec's rules."""

from __future__ import annotations

import pytest
from spec_helpers import compose_spec

from marin_rl.config.spec import SpecError
from marin_rl.runtime.coordinator import Coordinator
from marin_rl.runtime.one_step_off import VERSION_LAG, batch_weights_version, next_lagged_round
from marin_rl.runtime.weight_sync import WeightPacket


@pytest.mark.parametrize("base", [0, 7])  # a fresh run, and one resumed at version 7
def test_each_batch_is_sampled_with_the_weights_one_step_behind(base):
    steps = range(base + 1, base + 8)
    assert [batch_weights_version(s, base) for s in steps] == [base, base, *range(base + 1, base + 6)]
    # staleness when the trainer (at version s - 1) trains step s: 0 for the first step, then exactly 1
    assert [s - 1 - batch_weights_version(s, base) for s in steps] == [0] + [1] * 6


def round_for(next_step, drawn, extra=None, base=0, last_step=10):
    return next_lagged_round(next_step=next_step, drawn_step=drawn, base_version=base, last_step=last_step,
                             extra=extra, worker_id=1, incarnation=2, groups_per_round=4)


def test_a_worker_samples_a_step_while_the_step_before_trains_and_extra_rounds_first():
    first = round_for(1, drawn=0)
    assert (first.n_groups, first.stream, first.weights_version, first.step) == (4, ("one_step_off", 1, 2, 1), 0, 1)
    assert round_for(2, drawn=0) is None  # step 1's batch (also weights 0) is not drawn yet: they must not mix
    assert round_for(2, drawn=1).weights_version == 0
    assert round_for(4, drawn=2) is None and round_for(4, drawn=3).weights_version == 2
    extra = round_for(4, drawn=2, extra=(1, 3, 5))  # the trainer waits on it
    assert (extra.n_groups, extra.stream, extra.weights_version, extra.step) == (3, ("extra", 1, 5), 1, None)
    assert round_for(11, drawn=10) is None  # past train.steps: nothing to sample
    assert round_for(9, drawn=8, base=7).weights_version == 7  # a resumed run starts its pipeline at its version


def test_the_coordinator_serves_the_newest_two_versions_by_number():
    coordinator = Coordinator(lag=VERSION_LAG["one_step_off"])
    for version in (3, 4, 5):
        coordinator.publish_weights(WeightPacket(version, f"c{version}", 0))
    assert coordinator.pipeline() == (3, 3)  # no step up to the first version needs a batch
    coordinator.batch_drawn(4)
    coordinator.batch_drawn(5)
    assert coordinator.pipeline() == (3, 5)
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
