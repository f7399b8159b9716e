"""One run per run folder: an exclusive lock file for the life of a run, and the rule for reusing a folder.

The lock is `<run_dir>/run.lock`, created atomically (a hard link that fails if it exists) and holding the owner's pid, host and start time. A second
run finds it and refuses, naming the owner. A lock whose pid is dead on this host is stale (a killed run) and is
taken over; a lock from another host cannot be checked from here, so the message says how to remove it by hand.

A folder that already holds a run is refused unless the new run continues it (`resume=auto`) or asks for a fresh
start (`overwrite=true`), which empties it first. Hydra writes `.hydra/` and `<job>.log` into the folder before
any marin-rl code runs; those do not count as a previous run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

LOCK_FILE = "run.lock"
HYDRA_ENTRIES = {".hydra"}  # Hydra's own output, rewritten by every launch


class RunFolderError(RuntimeError):
    """The run folder is in use or holds another run: the message says by whom and what to do."""


def is_run_folder(path: str | Path) -> bool:
    """True for a folder a marin-rl run wrote into (spec.yaml or checkpoints/)."""
    path = Path(path)
    return (path / "spec.yaml").is_file() or (path / "checkpoints").is_dir()


def _is_hydra_or_lock(entry: Path) -> bool:
    is_lock = entry.name == LOCK_FILE or entry.name.startswith(LOCK_FILE + ".")
    return entry.name in HYDRA_ENTRIES or is_lock or (entry.is_file() and entry.suffix == ".log")


def previous_run_entries(run_dir: str | Path) -> list[Path]:
    """What an earlier run left in `run_dir` (everything but Hydra's .hydra/ and *.log, and the lock file)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(entry for entry in run_dir.iterdir() if not _is_hydra_or_lock(entry))


def clear_run_folder(run_dir: str | Path) -> list[Path]:
    """Fresh start: delete everything a previous run left and empty the Hydra logs; returns what was deleted."""
    run_dir = Path(run_dir)
    doomed = previous_run_entries(run_dir)
    for entry in doomed:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for log in run_dir.glob("*.log"):
        log.write_text("")  # Hydra appends (O_APPEND) to it: emptying keeps its handle valid
    return doomed


def check_folder_reusable(run_dir: str | Path, resume: str, overwrite: bool) -> None:
    """Raise RunFolderError when `run_dir` holds a previous run and the config neither resumes nor overwrites it."""
    run_dir = Path(run_dir).resolve()
    source = None if resume in ("never", "auto") else Path(resume).resolve()
    if overwrite and source is not None and (source == run_dir or run_dir in source.parents):
        raise RunFolderError(
            f"overwrite=true would delete resume={resume} (it is this run folder or inside it) before it is read"
        )
    if resume == "auto" or overwrite or source == run_dir:  # resume=<this folder> continues it like auto
        return
    left = previous_run_entries(run_dir)
    if left:
        names = ", ".join(entry.name for entry in left[:6]) + (", ..." if len(left) > 6 else "")
        raise RunFolderError(
            f"run folder {run_dir} already holds a run ({names}); refusing to mix two runs in one folder. "
            f"Continue it with resume=auto, start over in it with overwrite=true (deletes its contents), "
            f"or choose another folder (hydra.run.dir=...)"
        )


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host (signal 0 probes without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def describe_owner(owner: dict) -> str:
    """'pid 123 on host h (since <UTC time>)' from a lock file's content."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.get("started", 0)))
    return f"pid {owner.get('pid')} on host {owner.get('host')} (since {since})"


def read_owner(lock_path: Path) -> dict | None:
    """The lock file's owner record; None when it vanished; {} when unreadable (damaged by hand or disk)."""
    try:
        return json.loads(lock_path.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


def is_stale(owner: dict) -> bool:
    """A lock is stale when it names this host and a pid that no longer runs, or cannot be read at all."""
    if not owner:
        return True
    return owner.get("host") == socket.gethostname() and not pid_alive(int(owner.get("pid", -1)))


class RunLock:
    """Exclusive ownership of a run folder: `with RunLock(run_dir): ...`; refuses (RunFolderError) if held."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False
        self.took_over: dict | None = None  # owner of a stale lock this one replaced

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        # Write the record to a private file, then hard-link it into place: the link fails if a lock exists, and
        # a lock never exists without its content (no window where another run reads a half-written owner).
        mine = self.path.with_name(f"{LOCK_FILE}.{me['host']}.{me['pid']}")
        mine.write_text(json.dumps(me))
        try:
            for _ in range(3):  # a stale lock is removed and the link retried; a racing run wins the retry
                try:
                    os.link(mine, self.path)
                except FileExistsError:
                    owner = read_owner(self.path)
                    if owner is None:
                        continue  # released between our link and read
                    if not is_stale(owner):
                        raise RunFolderError(
                            f"run folder {self.path.parent} is in use by another run: {describe_owner(owner)}. "
                            f"Wait for it, or use another folder (hydra.run.dir=...). If that run is gone (e.g. "
                            f"its host crashed), delete {self.path}"
                        ) from None
                    self.took_over = owner
                    self.path.unlink(missing_ok=True)
                    continue
                self.held = True
                return self
        finally:
            mine.unlink(missing_ok=True)
        raise RunFolderError(f"could not take the lock {self.path}: another run keeps taking it")

    def release(self) -> None:
        """Remove the lock file if it is still ours."""
        if self.held and (read_owner(self.path) or {}).get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def claim_run_folder(run_dir: str | Path, resume: str, overwrite: bool) -> RunLock:
    """Lock `run_dir` for this run and check that it may be (re)used; the caller releases the returned lock."""
    lock = RunLock(run_dir).acquire()
    try:
        check_folder_reusable(run_dir, resume, overwrite)
    except BaseException:
        lock.release()
        raise
    if lock.took_over is not None:
        print(f"note: removed the stale lock of a run that is gone: {describe_owner(lock.took_over)}", flush=True)
    return lock
