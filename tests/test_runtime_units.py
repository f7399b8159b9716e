"""Runtime pieces without Ray: seed derivation, the coordinator's bookkeeping, worker shares, the summary's rate."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from marin_rl.config.seeds import derive_seed, numpy_rng
from marin_rl.runtime.coordinator import Coordinator
from marin_rl.runtime.driver import groups_for_worker, tokens_per_second
from marin_rl.runtime.weight_sync import WeightPacket


def test_derived_seeds_are_stable_across_processes_and_distinct_per_stream():
    names = [("rollout-data", "sync", 0, 0, 3), ("rollout-data", "sync", 0, 1, 3), ("rollout-data", "sync", 1, 0, 3),
             ("rollout-sampling", "sync", 0, 0, 3), ("eval", 3)]
    here = [derive_seed(7, *name) for name in names]
    assert len(set(here)) == len(names)  # worker, incarnation and purpose each name a different stream
    code = f"from marin_rl.config.seeds import derive_seed; print([derive_seed(7, *n) for n in {names!r}])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == str(here)  # no clock, no per-process hash salt
    assert derive_seed(7, "eval", 3) != derive_seed(8, "eval", 3)
    assert (numpy_rng(7, "x").integers(0, 2**31, 4) == numpy_rng(7, "x").integers(0, 2**31, 4)).all()


def test_a_restarted_worker_gets_a_new_incarnation():
    coordinator = Coordinator()
    assert [coordinator.register_worker(0), coordinator.register_worker(1), coordinator.register_worker(0)] == [0, 0, 1]


def test_extra_groups_are_claimed_whole_once_and_indexed_per_version():
    coordinator = Coordinator()
    coordinator.publish_weights(WeightPacket(3, "x", 0))
    assert coordinator.claim_extra_groups(3, worker_id=0) is None
    coordinator.request_extra_groups(3, 5)
    assert coordinator.claim_extra_groups(2, worker_id=0) is None  # a worker still on older weights gets nothing
    assert coordinator.claim_extra_groups(3, worker_id=0) == (5, 0)
    assert coordinator.claim_extra_groups(3, worker_id=1) is None  # claimed whole, by one worker
    coordinator.request_extra_groups(3, 2)
    assert coordinator.claim_extra_groups(3, worker_id=1) == (2, 1)
    coordinator.publish_weights(WeightPacket(4, "x", 0))
    coordinator.request_extra_groups(4, 1)
    assert coordinator.claim_extra_groups(4, worker_id=0) == (1, 0)


def test_an_extra_round_lost_with_its_worker_goes_back_to_the_queue():
    coordinator = Coordinator()
    coordinator.publish_weights(WeightPacket(7, "x", 0))
    coordinator.register_worker(1)
    coordinator.request_extra_groups(7, 4)
    assert coordinator.claim_extra_groups(7, worker_id=1) == (4, 0)
    assert coordinator.register_worker(1) == 1  # worker 1 died inside the round and came back
    assert coordinator.claim_extra_groups(7, worker_id=0) == (4, 0)  # the same round, for whoever is free
    coordinator.publish_weights(WeightPacket(8, "x", 0))
    assert coordinator.register_worker(0) == 0  # worker 0 restarts after v8: its v7 round is moot, not re-queued
    assert coordinator.claim_extra_groups(8, worker_id=0) is None and coordinator.claim_extra_groups(7, worker_id=0) is None


def test_an_idle_worker_waiting_for_news_wakes_on_weights_extra_rounds_and_stop_only():
    coordinator = Coordinator()
    coordinator.publish_weights(WeightPacket(3, "x", 0))

    def waited(version: int, announce) -> float:
        """Seconds wait_for_news(version, timeout 5 s) blocked while `announce` ran 0.2 s after it started."""
        timer = threading.Timer(0.2, announce)
        start = time.monotonic()
        timer.start()
        coordinator.wait_for_news(version, timeout_s=5.0)
        seconds = time.monotonic() - start
        timer.join()
        return seconds

    t0 = time.monotonic()
    coordinator.wait_for_news(3, timeout_s=0.3)  # nothing new: the timeout
    assert 0.25 < time.monotonic() - t0 < 2.0
    assert 0.15 < waited(3, lambda: coordinator.request_extra_groups(3, 2)) < 2.0
    coordinator.claim_extra_groups(3, worker_id=0)
    assert 0.15 < waited(3, lambda: coordinator.publish_weights(WeightPacket(4, "x", 0))) < 2.0
    t0 = time.monotonic()
    news = coordinator.wait_for_news(2, timeout_s=5.0)  # weights newer than v2 are already out: no wait at all
    assert time.monotonic() - t0 < 0.1
    assert news == (False, coordinator.packet) and news.packet.version == 4  # the woken worker need not ask again
    coordinator.request_extra_groups(3, 1)  # an extra round for other weights is not news to a v4 worker
    t0 = time.monotonic()
    coordinator.wait_for_news(4, timeout_s=0.3)
    assert time.monotonic() - t0 > 0.25
    assert 0.15 < waited(4, lambda: coordinator.request_stop("done")) < 2.0
    assert coordinator.wait_for_news(4, timeout_s=0.0) == (True, None)


@pytest.mark.parametrize("groups, workers, shares", [(8, 1, [8]), (8, 3, [3, 3, 2]), (5, 5, [1] * 5), (7, 2, [4, 3])])
def test_every_prompt_of_a_step_has_a_worker(groups, workers, shares):
    assert [groups_for_worker(groups, workers, i) for i in range(workers)] == shares


def test_summary_rate_adds_tokens_and_seconds_not_rates():
    rows = [
        {"throughput/sampled_tokens": 1000, "time/sample_s": 1.0},
        {"throughput/sampled_tokens": 300, "time/sample_s": 2.0},  # e.g. a skipped step: slow, few tokens
        {"step": 3},  # a row without sampling figures
    ]
    assert tokens_per_second(rows) == pytest.approx(1300 / 3.0)
    assert tokens_per_second([]) == 0.0


def test_grader_exceptions_are_counted_and_stop_the_run_past_the_limit():
    from marin_rl.environments.config import GradingConfig
    from marin_rl.environments.grading import GraderError, check_grader_errors

    cfg = GradingConfig(max_error_rate=0.05, min_graded_for_error_rate=100)
    check_grader_errors({"graded": 99, "errors": 99}, cfg)  # too few graded to judge
    check_grader_errors({"graded": 200, "errors": 10}, cfg)  # 5%: at the limit, allowed
    with pytest.raises(GraderError, match="11 of 200.*env.grading.max_error_rate=0.05"):
        check_grader_errors({"graded": 200, "errors": 11}, cfg)


def test_a_raising_grader_is_incorrect_and_reported(monkeypatch):
    from marin_rl.verifiers import graders

    monkeypatch.setitem(graders.GRADERS, "boom", lambda response, gold: 1 / 0)
    assert graders.grade("boom", "x", "y") == (False, "ZeroDivisionError: division by zero")
    assert graders.grade("gsm8k", "#### 4", "4") == (True, None)


def test_tracking_failures_never_stop_a_run(tmp_path, caplog):
    from marin_rl.runlog.writer import WandbLogger

    class BrokenRun:
        summary: dict = {}

        def log(self, *args, **kwargs):
            raise ConnectionError("wandb service lost")

        def finish(self):
            raise AssertionError("finish must not be called after logging failed")

    tracker = WandbLogger(tmp_path, "disabled", "p", None, "n", {})
    tracker.run = BrokenRun()
    with caplog.at_level("WARNING"):
        tracker.log({"step": 1, "reward/mean": 0.5})
        tracker.log({"step": 2, "reward/mean": 0.6})  # gave up after the first failure: no second warning
        tracker.finish({"status": "completed"})
    assert [r.getMessage() for r in caplog.records].count(
        "wandb log failed (ConnectionError: wandb service lost); the run goes on without wandb (metrics.jsonl has every row)"
    ) == 1
