"""The coordinator: a tiny Ray actor holding run state that every other actor reads (no heavy data)."""

from __future__ import annotations

import threading
from typing import NamedTuple

from marin_rl.runtime.weight_sync import WeightPacket

ExtraRound = tuple[int, int, int]  # (policy version, groups, index of the extra round within that version)


class News(NamedTuple):
    """What `wait_for_news` returns: the answers a woken worker would otherwise ask for in two more calls."""

    stop: bool  # a stop is requested
    packet: WeightPacket | None  # the newest weights, if newer than the waiting worker's


class Coordinator:
    def __init__(self, lag: int = 0):
        # rollout.mode=one_step_off samples a batch with the weights one version before the newest (lag 1): the
        # previous packet stays fetchable by version, and an extra round of that version is still wanted
        self.lag = lag
        self.packet: WeightPacket | None = None
        self.previous: WeightPacket | None = None
        self.first_version: int | None = None
        self.drawn_step = -1  # the last step whose whole batch the trainer has drawn (one_step_off's pipeline gate)
        self.stop_reason: str | None = None
        self.incarnations: dict[int, int] = {}
        self.extra_pending: list[ExtraRound] = []  # requested by the trainer, not yet claimed
        self.extra_claimed: dict[int, ExtraRound] = {}  # worker -> the extra round it took last
        self.extra_rounds: dict[int, int] = {}  # version -> extra rounds requested so far
        self.news = threading.Condition()  # announced on new weights, extra rounds and stop (`wait_for_news`)

    def register_worker(self, worker_id: int) -> int:
        """The worker's incarnation: 0 for its first start, +1 for every restart (it names the worker's streams).

        A restarted worker may have died inside an extra round: that round goes back to the queue, so the trainer
        does not wait for groups nobody samples (at worst a round arrives twice; the surplus goes stale)."""
        self.incarnations[worker_id] = self.incarnations.get(worker_id, -1) + 1
        lost = self.extra_claimed.pop(worker_id, None)
        if lost is not None and self.packet is not None and lost[0] >= self.packet.version - self.lag:
            self.extra_pending.append(lost)
        return self.incarnations[worker_id]

    def request_extra_groups(self, version: int, n_groups: int) -> None:
        """The trainer wants n_groups more groups sampled with weights `version` (dynamic sampling)."""
        index = self.extra_rounds.get(version, 0)
        self.extra_rounds[version] = index + 1
        self.extra_pending.append((version, n_groups, index))
        self._announce()

    def claim_extra_groups(self, version: int, worker_id: int) -> tuple[int, int] | None:
        """(n_groups, index) of a pending extra round for `version`, claimed whole by one worker; else None."""
        request = self._claim(worker_id, lambda r: r[0] == version)
        return None if request is None else (request[1], request[2])

    def claim_extra_round(self, worker_id: int) -> ExtraRound | None:
        """(version, n_groups, index) of the oldest pending extra round whatever its version, claimed whole by one
        worker (one_step_off: the worker loads that version for it); else None."""
        return self._claim(worker_id, lambda r: True)

    def _claim(self, worker_id: int, wanted) -> ExtraRound | None:
        """Take the oldest pending extra round that `wanted` accepts, recorded as claimed by `worker_id`."""
        request = next((r for r in self.extra_pending if wanted(r)), None)
        if request is not None:
            self.extra_pending.remove(request)
            self.extra_claimed[worker_id] = request
        return request

    def publish_weights(self, packet: WeightPacket) -> None:
        if self.packet is None or packet.version >= self.packet.version:
            if self.packet is not None and self.packet.version < packet.version:
                self.previous = self.packet
            self.packet = packet
            if self.first_version is None:  # where the run (or its resume) starts: no step up to it needs a batch
                self.first_version = self.drawn_step = packet.version
            # older ones are moot
            self.extra_pending = [r for r in self.extra_pending if r[0] >= packet.version - self.lag]
            self._announce()

    def weights_newer_than(self, version: int) -> WeightPacket | None:
        return self.packet if self.packet is not None and self.packet.version > version else None

    def wait_for_news(self, version: int, timeout_s: float) -> News:
        """Return once weights newer than `version` are out, an extra round for `version` is pending or a stop is
        requested, or after timeout_s; with the stop flag and the newer weights as they are then. An idle sync
        worker blocks here instead of polling on a timer, so it starts the next round the moment the trainer
        publishes (this actor is threaded: the driver gives it a thread per worker on top of its own)."""
        with self.news:
            self.news.wait_for(
                lambda: self.weights_newer_than(version) is not None or self.stop_reason is not None
                or any(r[0] == version for r in self.extra_pending),
                timeout=timeout_s,
            )
            return News(self.stop_reason is not None, self.weights_newer_than(version))

    def _announce(self) -> None:
        with self.news:
            self.news.notify_all()

    def weights_at(self, version: int) -> WeightPacket | None:
        """The packet of exactly `version` while it is one of the newest two, else None."""
        return next((p for p in (self.packet, self.previous) if p is not None and p.version == version), None)

    def batch_drawn(self, step: int) -> None:
        """The trainer has drawn the whole batch of `step` (extra rounds included) and trains it now."""
        self.drawn_step = max(self.drawn_step, step)

    def pipeline(self) -> tuple[int, int]:
        """(first published version, last step whose batch was drawn): one_step_off's schedule reads both."""
        return self.first_version, self.drawn_step

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        self._announce()

    def should_stop(self) -> bool:
        return self.stop_reason is not None
