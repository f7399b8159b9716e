"""The replay buffer: holds rollout groups between the rollout workers and the trainer.

It enforces the staleness bound with the per-token versions (a group whose OLDEST token is more than
`max_staleness` trainer steps old is dropped and counted), a capacity (oldest groups evicted first), a maximum
reuse count, and balanced sampling across environments (round-robin over envs, oldest group first within one).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass, field

from marin_rl.rollouts import RolloutGroup, staleness


@dataclass
class _Entry:
    group: RolloutGroup
    uses: int = 0


@dataclass
class BufferStats:
    added: int = 0
    dropped_stale: int = 0
    evicted: int = 0
    sampled: int = 0
    last_staleness: Counter = field(default_factory=Counter)  # staleness -> groups in the last batch


class ReplayBuffer:
    def __init__(self, capacity: int, max_reuse: int, max_staleness: int):
        self.capacity = capacity
        self.max_reuse = max_reuse
        self.max_staleness = max_staleness
        self._by_env: dict[str, deque[_Entry]] = {}
        self._lock = threading.Condition()
        self.stats = BufferStats()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._by_env.values())

    def add(self, groups: list[RolloutGroup]) -> None:
        with self._lock:
            for g in groups:
                self._by_env.setdefault(g.env, deque()).append(_Entry(g))
                self.stats.added += 1
            self._evict_over_capacity()
            self._lock.notify_all()

    def _evict_over_capacity(self) -> None:
        while sum(len(q) for q in self._by_env.values()) > self.capacity:
            oldest_env = min(
                (env for env, q in self._by_env.items() if q), key=lambda e: self._by_env[e][0].group.min_version
            )
            self._by_env[oldest_env].popleft()
            self.stats.evicted += 1

    def available(self, trainer_version: int) -> int:
        with self._lock:
            return self._count_fresh(trainer_version)

    def sample(
        self, n_groups: int, trainer_version: int, timeout_s: float | None = None, exclude: Collection = ()
    ) -> list[RolloutGroup] | None:
        """Take `n_groups` fresh groups, balanced across envs, none of them in `exclude` (what this batch already
        drew: with max_reuse > 1 a used group stays in front); waits up to `timeout_s` (None if short)."""
        excluded = {id(g) for g in exclude}
        with self._lock:
            ok = self._lock.wait_for(
                lambda: self._count_fresh(trainer_version, excluded) >= n_groups, timeout=timeout_s
            )
            self._drop_stale_locked(trainer_version)
            if not ok and self._count_fresh(trainer_version, excluded) < n_groups:
                return None
            picked: list[_Entry] = []
            envs = sorted(self._by_env)
            candidates = {env: [e for e in self._by_env[env] if id(e.group) not in excluded] for env in envs}
            cursor = {env: 0 for env in envs}
            while len(picked) < n_groups:
                progressed = False
                for env in envs:
                    if cursor[env] < len(candidates[env]) and len(picked) < n_groups:
                        picked.append(candidates[env][cursor[env]])
                        cursor[env] += 1
                        progressed = True
                if not progressed:
                    break
            self.stats.last_staleness = Counter(staleness(e.group, trainer_version) for e in picked)
            for e in picked:
                e.uses += 1
            for env in envs:
                self._by_env[env] = deque(e for e in self._by_env[env] if e.uses < self.max_reuse)
            self.stats.sampled += len(picked)
            return [e.group for e in picked]

    def _count_fresh(self, trainer_version: int, excluded: Collection[int] = ()) -> int:
        return sum(
            1 for q in self._by_env.values() for e in q
            if staleness(e.group, trainer_version) <= self.max_staleness and id(e.group) not in excluded
        )

    def _drop_stale_locked(self, trainer_version: int) -> int:
        dropped = 0
        for env, q in self._by_env.items():
            fresh = deque(e for e in q if staleness(e.group, trainer_version) <= self.max_staleness)
            dropped += len(q) - len(fresh)
            self._by_env[env] = fresh
        self.stats.dropped_stale += dropped
        return dropped
