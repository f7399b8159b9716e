"""Entry point of one grading worker: `python -m marin_rl.verifiers.grading_worker IN_FD OUT_FD MEM_MB CPU_S`.

Protocol over two pipes (multiprocessing `Connection` framing, pickled tuples):
parent -> worker: (kind, [(index, response, gold), ...]) or None to stop; worker -> parent: "ready" once after
warm-up, then (index, verdict, error) for every item in order (error: None, or the grader's exception as text). A plain subprocess (not multiprocessing's spawn or
forkserver) so the worker never re-imports the caller's `__main__` (a Ray worker, a Hydra script, pytest).

The parent kills a worker at an item's deadline. As a backstop for when the parent itself dies mid-item (a
killed Ray actor), every item also runs under a kernel CPU-time limit (RLIMIT_CPU, CPU_S seconds beyond what the
worker used so far): a worker orphaned inside an endless big-integer power is terminated by SIGXCPU instead of
burning a core forever. Between items, a closed pipe (EOF) ends the worker.
"""

from __future__ import annotations

import math
import resource
import sys
from multiprocessing.connection import Connection


def _limit_cpu_time(seconds_from_now: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = math.ceil(usage.ru_utime + usage.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + seconds_from_now
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def serve(inbox: Connection, outbox: Connection, memory_limit_mb: int, cpu_limit_s: int) -> None:
    if memory_limit_mb > 0:
        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from marin_rl.verifiers import graders

    graders.warm_up()
    outbox.send("ready")
    while True:
        try:
            message = inbox.recv()
        except EOFError:  # parent went away
            return
        if message is None:
            return
        kind, items = message
        for index, response, gold in items:
            if cpu_limit_s > 0:
                _limit_cpu_time(cpu_limit_s)
            outbox.send((index, *graders.grade(kind, response, gold)))


def main(argv: list[str]) -> None:
    in_fd, out_fd, memory_limit_mb, cpu_limit_s = (int(arg) for arg in argv)
    serve(Connection(in_fd, writable=False), Connection(out_fd, readable=False), memory_limit_mb, cpu_limit_s)


if __name__ == "__main__":
    main(sys.argv[1:])
