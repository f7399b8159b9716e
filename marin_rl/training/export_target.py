"""Where an export may not go: onto, around or into its checkpoint or any run folder (--overwrite deletes --out)."""

from __future__ import annotations

import os
from pathlib import Path

from marin_rl.runlog.run_lock import is_run_folder


class UnsafeExportTarget(ValueError):
    """--out would overwrite (or be deleted with) a checkpoint or a run folder."""


def _relation(out: Path, protected: Path) -> str | None:
    """How `out` relates to `protected` ('is', 'contains', 'lies inside'), or None when they are apart."""
    if out == protected:
        return "is"
    if out in protected.parents:
        return "contains"
    if protected in out.parents:
        return "lies inside"
    return None


def _first_run_folder_under(folder: Path) -> Path | None:
    """Some run folder at or below `folder` (stops at the first), or None."""
    for root, dirs, _ in os.walk(folder):
        if is_run_folder(root):
            return Path(root)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
    return None


def check_export_target(out: str | Path, checkpoint: str | Path) -> None:
    """Raise UnsafeExportTarget when `out` is, contains or lies inside `checkpoint` or a run folder."""
    out, checkpoint = Path(out).resolve(), Path(checkpoint).resolve()
    protected = [("the checkpoint", checkpoint)]
    if checkpoint.parent.name == "checkpoints":
        protected.append(("the checkpoint's run folder", checkpoint.parent.parent))
    clashes = [(relation, what, path) for what, path in protected if (relation := _relation(out, path))]
    clashes.sort(key=lambda clash: clash[0] != "is")  # the exact match is the clearest message
    if clashes:
        relation, what, path = clashes[0]
        raise UnsafeExportTarget(f"--out {out} {relation} {what} {path}; export somewhere else")
    for folder in (out, *out.parents):
        if is_run_folder(folder):
            raise UnsafeExportTarget(f"--out {out} lies inside the run folder {folder}; export somewhere else")
    if out.is_dir() and (inner := _first_run_folder_under(out)) is not None:
        raise UnsafeExportTarget(f"--out {out} contains the run folder {inner}; export somewhere else")
