"""Checkpoint integrity: a manifest of every file's size and SHA-256, written before the COMPLETE marker.

The storage layer (TensorStore/zarr) reads a missing chunk file as zeros, so a COMPLETE marker alone cannot tell a
whole checkpoint from a damaged one. `verify_checkpoint` re-reads every file against the manifest; `newest_verified`
picks the newest checkpoint that passes and says which newer ones it skipped and why.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

MANIFEST_FILE = "MANIFEST.json"
# Written after the manifest (COMPLETE) or holding it: never listed in it.
UNLISTED = {MANIFEST_FILE, "COMPLETE"}
_CHUNK = 1 << 22  # hash in 4 MiB reads: constant memory for multi-GB arrays


class CheckpointCorruptError(RuntimeError):
    """A finished checkpoint whose files no longer match its manifest."""


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def file_manifest(folder: str | Path) -> dict[str, dict]:
    """{relative path: {"size", "sha256"}} of every file under `folder` except the marker and the manifest."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() not in UNLISTED
    }


def write_manifest(folder: str | Path) -> Path:
    """Record the current files of `folder` in its MANIFEST.json (call once the data is written, before COMPLETE)."""
    path = Path(folder) / MANIFEST_FILE
    path.write_text(json.dumps({"files": file_manifest(folder)}, indent=0, sort_keys=True))
    return path


def manifest_problems(folder: str | Path) -> list[str]:
    """What is wrong with `folder` against its manifest (missing files, sizes, hashes); [] = verified."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST_FILE
    if not manifest_path.is_file():
        return [f"no {MANIFEST_FILE} (saved without one, so its files cannot be checked)"]
    try:
        expected = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        return [f"{MANIFEST_FILE} is unreadable ({err})"]
    problems = []
    for name, want in sorted(expected.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif (size := path.stat().st_size) != want["size"]:
            problems.append(f"{name} has {size} bytes, {want['size']} when saved")
        elif file_sha256(path) != want["sha256"]:
            problems.append(f"{name} has changed since it was saved (SHA-256 differs)")
    return problems


def verify_checkpoint(folder: str | Path) -> None:
    """Raise CheckpointCorruptError naming the damaged files unless `folder` matches its manifest."""
    problems = manifest_problems(folder)
    if problems:
        raise CheckpointCorruptError(f"checkpoint {folder} is damaged: {summarize(problems)}")


def summarize(problems: list[str], shown: int = 3) -> str:
    """The first few problems, and how many more there are."""
    more = len(problems) - shown
    return "; ".join(problems[:shown]) + (f"; and {more} more" if more > 0 else "")


def newest_verified(checkpoints: list[Path]) -> tuple[Path | None, list[tuple[Path, list[str]]]]:
    """(newest checkpoint of `checkpoints` (oldest first) that verifies or None, [(newer rejected one, problems)])."""
    rejected: list[tuple[Path, list[str]]] = []
    for path in reversed(checkpoints):
        problems = manifest_problems(path)
        if not problems:
            return path, rejected
        rejected.append((path, problems))
    return None, rejected


def fallback_message(chosen: Path | None, rejected: list[tuple[Path, list[str]]]) -> str:
    """One line per skipped checkpoint and what is used instead: printed, never silent."""
    lines = [f"checkpoint {path} fails verification: {summarize(problems)}" for path, problems in rejected]
    lines.append(
        f"falling back to {chosen}, the newest checkpoint that verifies" if chosen is not None
        else "no checkpoint there verifies"
    )
    return "\n".join(lines)
