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
