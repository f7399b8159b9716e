"""The glibc allocator setting the run's actors start with: large blocks on transparent huge pages.

XLA's CPU runtime allocates each step's temporaries with malloc; glibc serves blocks above its mmap threshold
with fresh anonymous pages, so every step page-faults its working set in again, 4 KiB at a time. With
`glibc.malloc.hugetlb=1` (glibc >= 2.35) malloc advises the kernel to back those blocks with 2 MiB transparent
huge pages (the kernel's THP mode must be `madvise` or `always`), 512x fewer faults. Measured in
docs/benchmarks.md ("Huge pages for the allocator"). glibc reads GLIBC_TUNABLES once, when a process starts, so
this is an environment variable of the actors (runtime_env), not something a running process can switch on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

TUNABLES_VAR = "GLIBC_TUNABLES"
HUGEPAGE_TUNABLE = "glibc.malloc.hugetlb=1"


def without_hugepage_tunable(tunables: str) -> str:
    """`tunables` (colon-separated name=value pairs) without any glibc.malloc.hugetlb setting."""
    return ":".join(t for t in tunables.split(":") if t and not t.startswith("glibc.malloc.hugetlb="))


def with_hugepage_tunable(tunables: str) -> str:
    """`tunables` with glibc.malloc.hugetlb=1 in place of any earlier value."""
    return ":".join(t for t in (without_hugepage_tunable(tunables), HUGEPAGE_TUNABLE) if t)


def allocator_env(malloc_hugepages: bool, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Environment variables for a process that should put large malloc blocks on huge pages ({} when not)."""
    if not malloc_hugepages:
        return {}
    return {TUNABLES_VAR: with_hugepage_tunable(environ.get(TUNABLES_VAR, ""))}


def reexec_with_allocator(malloc_hugepages: bool) -> None:
    """Restart this Python program with the hugetlb tunable set (or removed), unless it already runs that way:
    benchmarks that compute in their own process use this to run as the actors do."""
    current = os.environ.get(TUNABLES_VAR, "")
    wanted = with_hugepage_tunable(current) if malloc_hugepages else without_hugepage_tunable(current)
    if wanted == current:
        return
    env = {k: v for k, v in os.environ.items() if k != TUNABLES_VAR}
    if wanted:
        env[TUNABLES_VAR] = wanted
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # orig_argv keeps flags such as -u
