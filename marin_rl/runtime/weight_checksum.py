"""The checksum a weight packet carries, computed on every core of the host when the weights are large.

A weight set's checksum (`arrays_checksum`: the object store and files channels) is xxh3-64 over each array's dtype
and shape, then the xxh3-64 digests of its bytes cut into CHECKSUM_PIECE_BYTES pieces, in order. A shared-memory
slot's (`buffer_checksum`) is xxh3-64 over the slot's layout, then the digests of its whole payload cut the same way:
the bytes a reader maps, hashed as one run instead of array by array (at 4M parameters, 45 arrays, that took 0.7 ms
against 0.9-1.2 ms; docs/benchmarks.md "Stop 42"). Hashing piece by piece lets the host's cores share the work
(xxhash's update and np.copyto release the GIL on large buffers). Neither value depends on the number of cores, nor
on whether the pool is used.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import xxhash

# Small enough that a 4M-parameter model (16 MiB of f32) splits evenly over a few cores, large enough that each
# piece's Python work (a few microseconds) is small next to hashing its bytes (~0.1 ms at xxh3's speed here).
CHECKSUM_PIECE_BYTES = 1 << 21
# Below this many bytes a weight set is hashed (and copied) on the calling thread: waking the pool's threads, idle
# between steps, cost more than they saved (2-core VM, medians of 40 publishes 50 ms apart, publish + fetch:
# 0.15M 2.6 -> 1.9 ms and 4M 7.5 -> 6.6 ms inline; at 20M the pool still wins, 20.2 against 25.1 ms; docs/benchmarks.md
# "Stop 35").
PARALLEL_MIN_BYTES = 1 << 25


def host_cores() -> int:
    """The cores this process may run on (its affinity mask, where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(host_cores(), thread_name_prefix="weight-checksum")


def _pieces(a: np.ndarray) -> list[np.ndarray]:
    """The bytes of an array (C order) as views of at most CHECKSUM_PIECE_BYTES each (one empty view if none);
    views of the array itself where it is C-contiguous."""
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    return [flat[i : i + CHECKSUM_PIECE_BYTES] for i in range(0, flat.size, CHECKSUM_PIECE_BYTES)] or [flat]


def _digest(piece: np.ndarray) -> bytes:
    h = xxhash.xxh3_64()
    h.update(piece)  # the method, not xxh3_64_digest: it releases the GIL on large buffers
    return h.digest()


def _copy(job: tuple[np.ndarray, np.ndarray]) -> None:
    dest, src = job
    np.copyto(dest, src)


def _in_parallel(fn: Callable, jobs: list, sizes: list[int]) -> list:
    """[fn(job) for job in jobs], the list cut into one run of consecutive jobs of about equal size per core (one
    task per core: a task per piece costs more in dispatch than a small model takes to hash); on this thread when
    the jobs hold fewer than PARALLEL_MIN_BYTES."""
    cores = min(host_cores(), len(jobs))
    if cores <= 1 or sum(sizes) < PARALLEL_MIN_BYTES:
        return [fn(j) for j in jobs]
    ends = np.searchsorted(np.cumsum(sizes), np.arange(1, cores) * sum(sizes) / cores, side="right")
    runs = np.split(np.arange(len(jobs)), ends)
    results = _pool().map(lambda run: [fn(jobs[i]) for i in run], runs)
    return [r for rs in results for r in rs]


def _combine(arrays: list[np.ndarray], digests: list[bytes]) -> str:
    h = xxhash.xxh3_64()
    for a in arrays:
        h.update(f"{a.dtype}{a.shape}".encode())
    for d in digests:
        h.update(d)
    return h.hexdigest()


def arrays_checksum(arrays: list[np.ndarray]) -> str:
    """xxh3-64 of the arrays' dtypes and shapes and of their pieces' xxh3-64 digests, the pieces hashed in parallel."""
    pieces = [p for a in arrays for p in _pieces(a)]
    return _combine(arrays, _in_parallel(_digest, pieces, [p.size for p in pieces]))


def buffer_checksum(buffer: np.ndarray, header: bytes) -> str:
    """xxh3-64 of `header` and of the xxh3-64 digests of `buffer`'s bytes (C-contiguous) cut into pieces, the pieces
    hashed in parallel."""
    pieces = _pieces(buffer)
    h = xxhash.xxh3_64(header)
    for d in _in_parallel(_digest, pieces, [p.size for p in pieces]):
        h.update(d)
    return h.hexdigest()


def copy_arrays(dests: list[np.ndarray], arrays: list[np.ndarray]) -> None:
    """Copy each array into its twin in `dests` (writable, C-contiguous, same dtype and shape), piece by piece in
    parallel."""
    if not all(d.flags.c_contiguous and d.flags.writeable for d in dests):
        raise ValueError("copy_arrays copies into writable C-contiguous arrays only")
    if [(d.dtype, d.shape) for d in dests] != [(a.dtype, a.shape) for a in arrays]:
        raise ValueError("copy_arrays needs destinations of the arrays' dtypes and shapes")
    jobs = [job for d, a in zip(dests, arrays) for job in zip(_pieces(d), _pieces(a), strict=True)]
    _in_parallel(_copy, jobs, [d.size for d, _ in jobs])
