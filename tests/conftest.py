"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# ../shared/data next to the repository root (tests/ -> repo root -> its parent).
SHARED_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The read-only datasets in ../shared/data (gsm8k/, math500/); skipped when absent, a failure under CI=true."""
    if not SHARED_DATA_DIR.is_dir():
        message = (
            f"shared test data not found at {SHARED_DATA_DIR} (expected ../shared/data next to the repo)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DATA_DIR


# `make test` runs the suite on two pytest-xdist workers, one file at a time per worker (-n 2 --dist loadfile: a
# file's module-scoped fixtures are built once), files handed out in collection order (--no-loadscope-reorder).
# The files of long end-to-end runs go first, longest first (pytest --durations on the 2-core machine), so the two
# workers finish together instead of one ending on a minutes-long run while the other idles.
LONGEST_FILES_FIRST = (
    "test_rl_loop.py",  # six runs, ~430 s in all
    "test_vllm_rl.py",  # a learning run of ~300 s and a 6-step one
    "test_two_node_ray.py",
    "test_ray_security.py",
    "test_rl_mesh.py",
    "test_mesh.py",
    "test_sampler_mesh.py",
    "test_interrupt.py",
    "test_modes.py",
    "test_vllm_backend.py",
)


def duration_rank(item: pytest.Item) -> int:
    """Position of the test's file in LONGEST_FILES_FIRST; every other file after them."""
    name = item.path.name
    return LONGEST_FILES_FIRST.index(name) if name in LONGEST_FILES_FIRST else len(LONGEST_FILES_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=duration_rank)  # stable: collection order within a file and among the other files
