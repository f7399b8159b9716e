"""The coordinator: a tiny Ray actor holding run state that every other actor reads (no heavy data)."""

from __future__ import annotations

import time

from marin_rl.runtime.weight_sync import WeightPacket


class Coordinator:
    def __init__(self):
        self.packet: WeightPacket | None = None
        self.stop_reason: str | None = None
        self.heartbeats: dict[int, tuple[float, str]] = {}
        self.worker_errors: list[str] = []
        self.incarnations: dict[int, int] = {}
        self.extra_request: tuple[int, int, int] | None = None  # (version, groups, index) not yet claimed
        self.extra_rounds: dict[int, int] = {}  # version -> extra rounds requested so far

    def register_worker(self, worker_id: int) -> int:
        """The worker's incarnation: 0 for its first start, +1 for every restart (it names the worker's streams)."""
        self.incarnations[worker_id] = self.incarnations.get(worker_id, -1) + 1
        return self.incarnations[worker_id]

    def request_extra_groups(self, version: int, n_groups: int) -> None:
        """The trainer wants n_groups more groups sampled with weights `version` (dynamic sampling)."""
        index = self.extra_rounds.get(version, 0)
        self.extra_rounds[version] = index + 1
        self.extra_request = (version, n_groups, index)

    def claim_extra_groups(self, version: int) -> tuple[int, int] | None:
        """(n_groups, index) of the pending extra round for `version`, claimed whole by one worker; else None."""
        if self.extra_request is None or self.extra_request[0] != version:
            return None
        _, n_groups, index = self.extra_request
        self.extra_request = None
        return n_groups, index

    def publish_weights(self, packet: WeightPacket) -> None:
        if self.packet is None or packet.version >= self.packet.version:
            self.packet = packet

    def weights_newer_than(self, version: int) -> WeightPacket | None:
        return self.packet if self.packet is not None and self.packet.version > version else None

    def latest_version(self) -> int:
        return -1 if self.packet is None else self.packet.version

    def request_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason

    def should_stop(self) -> bool:
        return self.stop_reason is not None

    def heartbeat(self, worker_id: int, status: str) -> None:
        self.heartbeats[worker_id] = (time.time(), status)

    def report_error(self, message: str) -> None:
        self.worker_errors.append(message)

    def state(self) -> dict:
        return {
            "version": self.latest_version(),
            "stop_reason": self.stop_reason,
            "heartbeats": {k: {"age_s": time.time() - t, "status": s} for k, (t, s) in self.heartbeats.items()},
            "worker_errors": list(self.worker_errors[-5:]),
        }
