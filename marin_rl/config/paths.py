"""Where the project lives, so paths in configs can be given relative to it."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def project_path(path: str) -> Path:
    """`path` as given when absolute, else under the project root (not the Hydra run folder a run starts in)."""
    given = Path(path).expanduser()
    return given if given.is_absolute() else PROJECT_ROOT / given
