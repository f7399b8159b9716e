"""hardware.malloc_hugepages: the run's actors start with glibc.malloc.hugetlb=1, and then XLA's large host buffers
really land on transparent huge pages (runtime/allocator.py)."""

from __future__ import annotations

import platform
import re
import sys
from pathlib import Path

import pytest
from spec_helpers import compose_spec

from marin_rl.runtime.allocator import allocator_env, with_hugepage_tunable
from marin_rl.runtime.ray_cluster import actor_runtime_env, init_ray

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
BLOCK_MIB = 64


def thp_mode() -> str | None:
    """The kernel's transparent huge page mode (always | madvise | never), None where the kernel has no THP."""
    if not THP_MODE.exists():
        return None
    return re.search(r"\[(\w+)\]", THP_MODE.read_text()).group(1)


def glibc_has_hugetlb_tunable() -> bool:
    lib, version = platform.libc_ver()
    return lib == "glibc" and tuple(int(p) for p in version.split(".")[:2]) >= (2, 35)


def test_the_tunable_is_added_once_and_other_tunables_are_kept():
    assert with_hugepage_tunable("") == "glibc.malloc.hugetlb=1"
    assert with_hugepage_tunable("glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2") == (
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    )
    assert allocator_env(False, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {}
    assert allocator_env(True, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {
        "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    }


def _start_env_and_huge_page_growth() -> tuple[str | None, int]:
    """In a fresh actor process: GLIBC_TUNABLES as the process started with it, and how many KiB of anonymous
    huge pages a BLOCK_MIB jax array added."""
    import jax.numpy as jnp

    def anon_huge_kib() -> int:
        return int(re.search(r"AnonHugePages:\s+(\d+) kB", Path("/proc/self/smaps_rollup").read_text()).group(1))

    start_env = dict(
        item.split("=", 1) for item in Path("/proc/self/environ").read_text().split("\0") if "=" in item
    )
    before = anon_huge_kib()
    block = jnp.ones((BLOCK_MIB * 2**20 // 4,), jnp.float32).block_until_ready()
    grown = anon_huge_kib() - before
    del block
    return start_env.get("GLIBC_TUNABLES"), grown


@pytest.mark.skipif(thp_mode() in (None, "never"), reason="the kernel offers no transparent huge pages")
@pytest.mark.skipif(not glibc_has_hugetlb_tunable(), reason="glibc < 2.35 has no glibc.malloc.hugetlb tunable")
def test_actors_start_with_the_tunable_and_their_large_buffers_land_on_huge_pages(tmp_path):
    import ray

    on = compose_spec(["recipe=quickstart", "ray.num_cpus=1"])
    off = compose_spec(["recipe=quickstart", "ray.num_cpus=1", "hardware.malloc_hugepages=false"])
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not on the workers' path
    probe = ray.remote(num_cpus=0)(_start_env_and_huge_page_growth)
    assert init_ray(off, tmp_path)  # the job's own environment lacks the tunable: only the actor's adds it
    try:
        tunables_on, grown_on = ray.get(probe.options(runtime_env=actor_runtime_env(on, "trainer")).remote())
        tunables_off, grown_off = ray.get(probe.options(runtime_env=actor_runtime_env(off, "trainer")).remote())
    finally:
        ray.shutdown()
    assert "glibc.malloc.hugetlb=1" in tunables_on
    assert grown_on >= BLOCK_MIB * 1024 // 2, grown_on
    assert tunables_off is None or "glibc.malloc.hugetlb=1" not in tunables_off
    if thp_mode() == "madvise":  # under "always" every large block gets huge pages anyway
        assert grown_off < BLOCK_MIB * 1024 // 4, grown_off
