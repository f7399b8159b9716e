"""A process pool for grading untrusted responses with a hard per-item timeout.

Why not `concurrent.futures.ProcessPoolExecutor`: it cannot stop one stuck task (a tower of exponents keeps a
worker inside a C-level big-integer power forever); the only remedy is to kill that worker and start another.
Here each worker owns a pipe, streams back one verdict per item, and the parent kills and replaces a worker whose
current item passes its deadline (verdict False) or that dies (verdict False); the rest of its chunk is re-queued.

Workers are plain subprocesses (`python -m marin_rl.verifiers.grading_worker`): they never inherit JAX or Ray
state and never re-import the caller's `__main__`, so the pool is safe inside Ray actors and from any thread
(nothing needs the main thread: deadlines are enforced from the parent). Starting one takes ~1.5 s (sympy and
math-verify imports), paid once per worker and again only when a worker is replaced.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

logger = logging.getLogger(__name__)

KINDS = ("math", "gsm8k", "math_symbolic")  # graders.GRADERS, importable here without sympy
DEFAULT_TIMEOUT_S = 5.0
# A starting worker imports sympy and math-verify (~1.5 s when idle): allow for a busy machine.
DEFAULT_STARTUP_TIMEOUT_S = 120.0
# Address-space cap per worker: a `10^{10^{10}}` answer then fails fast with MemoryError instead of swapping.
DEFAULT_MEMORY_LIMIT_MB = 4096
# Kernel CPU-time backstop per item, as a multiple of timeout_s (only matters if this process dies mid-item).
CPU_BACKSTOP_FACTOR = 4
# Items per message; small enough that a killed worker re-queues little, large enough to amortise the pipe.
DEFAULT_CHUNK_SIZE = 32
_WORKER_MODULE = "marin_rl.verifiers.grading_worker"
LOGGED_ERRORS = 5  # grader exceptions logged in full (with the response and gold) per pool; later ones are counted
LOGGED_INPUT_CHARS = 200  # of a response or gold in that log line


def available_cpus() -> int:
    """CPUs this process may run on (respects affinity / container limits better than os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection  # verdicts come in here
    sender: Connection  # chunks go out here
    started_at: float
    ready: bool = False
    kind: str = ""
    pending: deque = field(default_factory=deque)  # (index, response, gold) not yet answered, current first
    deadline: float = math.inf


class GradingPoolError(RuntimeError):
    """The pool could not start a worker (broken install, no resources); never raised for a bad response."""


class GradingPool:
    """`grade_many(kind, responses, golds)` over worker processes; each item is bounded by `timeout_s`.

    A timed-out or crashed item counts as incorrect; the worker is replaced and the pool keeps going. Calls from
    several threads are serialised. Use as a context manager or call `close()`; `default_pool()` is closed at exit.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
    ) -> None:
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be >= 1 or None (= all CPUs), got {max_workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.max_workers = max_workers or available_cpus()
        self.timeout_s = float(timeout_s)
        self.memory_limit_mb = memory_limit_mb
        self.chunk_size = chunk_size
        self.startup_timeout_s = startup_timeout_s
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self.graded = 0  # items graded since the pool started (timeouts and errors included)
        self.timeouts = 0  # items that hit the deadline since the pool started
        self.crashes = 0  # items whose worker died under them
        self.errors = 0  # items whose grader raised (graded incorrect; the first LOGGED_ERRORS are logged)

    # ----------------------------------------------------------------------------------------------- lifecycle
    def _start_worker(self) -> _Worker:
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        # The worker must import this very package, also when the caller got it from a path (Ray working_dir).
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        cpu_backstop_s = math.ceil(self.timeout_s * CPU_BACKSTOP_FACTOR)
        args = [
            str(to_worker_read),
            str(from_worker_write),
            str(self.memory_limit_mb or 0),
            str(cpu_backstop_s),
        ]
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, *args],
                pass_fds=(to_worker_read, from_worker_write),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(to_worker_read)
            os.close(from_worker_write)
        return _Worker(
            process=process,
            conn=Connection(from_worker_read, writable=False),
            sender=Connection(to_worker_write, readable=False),
            started_at=time.monotonic(),
        )

    @staticmethod
    def _alive(worker: _Worker) -> bool:
        return worker.process.poll() is None

    @staticmethod
    def _stop_worker(worker: _Worker) -> None:
        if worker.process.poll() is None:
            worker.process.kill()
        worker.process.wait(timeout=10)
        worker.conn.close()
        worker.sender.close()

    def close(self) -> None:
        """Stop all workers (idempotent). They hold no state worth a graceful exit, so they are killed."""
        with self._lock:
            self._closed = True
            for worker in self._workers:
                self._stop_worker(worker)
            self._workers = []

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring and for tests that kill one)."""
        return [worker.process.pid for worker in self._workers if self._alive(worker)]

    # ------------------------------------------------------------------------------------------------ grading
    def grade_one(self, kind: str, response: str, gold: str) -> bool:
        return self.grade_many(kind, [response], [gold])[0]

    def grade_many(self, kind: str, responses: Sequence[str], golds: Sequence[str]) -> list[bool]:
        """Verdicts for `responses[i]` against `golds[i]`; an item past `timeout_s` (or whose worker died) is False."""
        if kind not in KINDS:
            raise ValueError(f"unknown grading kind {kind!r}; allowed: {list(KINDS)}")
        if len(responses) != len(golds):
            raise ValueError(f"got {len(responses)} responses but {len(golds)} golds")
        if not responses:
            return []
        items = [
            (index, str(response), str(gold))
            for index, (response, gold) in enumerate(zip(responses, golds, strict=True))
        ]
        with self._lock:
            if self._closed:
                raise GradingPoolError("grade_many called on a closed GradingPool")
            verdicts = self._run(kind, items)
            self.graded += len(items)
            return verdicts

    def _run(self, kind: str, items: list[tuple[int, str, str]]) -> list[bool]:
        verdicts: list[bool | None] = [None] * len(items)
        # Enough chunks to keep every worker busy, no chunk larger than chunk_size.
        size = max(1, min(self.chunk_size, math.ceil(len(items) / self.max_workers)))
        queue: deque[list[tuple[int, str, str]]] = deque(
            items[i : i + size] for i in range(0, len(items), size)
        )
        for worker in [w for w in self._workers if not self._alive(w)]:  # died between calls
            self._stop_worker(worker)
            self._workers.remove(worker)
        while len(self._workers) < min(self.max_workers, len(queue)):
            self._workers.append(self._start_worker())

        while queue or any(worker.pending for worker in self._workers):
            for worker in self._workers:
                if worker.ready and not worker.pending and queue:
                    self._assign(worker, kind, queue.popleft(), queue)
            busy = [w for w in self._workers if w.pending or not w.ready]
            deadline = min(w.deadline if w.ready else w.started_at + self.startup_timeout_s for w in busy)
            for conn in wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic())):
                worker = next(w for w in busy if w.conn is conn)
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    self._replace(worker, queue, verdicts, reason="died")
                    continue
                if message == "ready":
                    worker.ready = True
                    continue
                index, verdict, error = message
                verdicts[index] = verdict
                if error is not None:
                    self._record_error(kind, worker.pending[0], error)
                worker.pending.popleft()
                worker.deadline = time.monotonic() + self.timeout_s
            now = time.monotonic()
            for worker in list(self._workers):
                if not worker.ready and now > worker.started_at + self.startup_timeout_s:
                    self._fail_startup(worker, f"did not start within {self.startup_timeout_s:.0f}s")
                if worker.ready and worker.pending and now > worker.deadline:
                    self._replace(worker, queue, verdicts, reason="timed out")
        return [bool(verdict) for verdict in verdicts]

    def _record_error(self, kind: str, item: tuple[int, str, str], error: str) -> None:
        """Count a grader exception; log the first few with their input, so a broken grader is seen, not hidden."""
        self.errors += 1
        if self.errors <= LOGGED_ERRORS:
            _, response, gold = item
            logger.warning(
                "grader %s raised %s on response %r (gold %r); graded incorrect%s", kind, error,
                response[:LOGGED_INPUT_CHARS], gold[:LOGGED_INPUT_CHARS],
                "; later errors are only counted" if self.errors == LOGGED_ERRORS else "",
            )

    def counts(self) -> dict[str, int]:
        """Items graded, timed out, crashed and raising since the pool started."""
        return {"graded": self.graded, "timeouts": self.timeouts, "crashes": self.crashes, "errors": self.errors}

    def _assign(self, worker: _Worker, kind: str, chunk: list[tuple[int, str, str]], queue: deque) -> None:
        try:
            worker.sender.send((kind, chunk))
        except (
            BrokenPipeError,
            OSError,
        ):  # died while idle: nothing of this chunk was graded, so no verdicts
            queue.appendleft(chunk)
            self._stop_worker(worker)
            self._workers[self._workers.index(worker)] = self._start_worker()
            return
        worker.kind, worker.pending = kind, deque(chunk)
        worker.deadline = time.monotonic() + self.timeout_s

    def _fail_startup(self, worker: _Worker, what: str) -> None:
        self._stop_worker(worker)
        self._workers.remove(worker)
        raise GradingPoolError(
            f"a grading worker {what} (exit code {worker.process.returncode}); "
            "check that `import math_verify` works in this environment"
        )

    def _replace(self, worker: _Worker, queue: deque, verdicts: list, reason: str) -> None:
        """Kill `worker`, fail its current item, re-queue the rest of its chunk, and start a fresh worker."""
        if not worker.ready:
            self._fail_startup(worker, "exited while starting")
        self._stop_worker(worker)
        if worker.pending:
            index, _, _ = worker.pending.popleft()
            verdicts[index] = False
            if reason == "timed out":
                self.timeouts += 1
            else:
                self.crashes += 1
            logger.warning(
                "grading item %d (%s) %s (limit %.1fs); its worker was replaced",
                index,
                worker.kind,
                reason,
                self.timeout_s,
            )
            if worker.pending:
                queue.appendleft(list(worker.pending))
        self._workers[self._workers.index(worker)] = self._start_worker()


_default_pool: GradingPool | None = None
_default_pool_lock = threading.Lock()


def default_pool() -> GradingPool:
    """A process-wide pool sized to the machine, created on first use and closed at interpreter exit."""
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = GradingPool()
            atexit.register(_default_pool.close)
        return _default_pool
