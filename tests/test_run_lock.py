"""One run per run folder: a second run is refused naming the owner, stale locks are taken over, and a folder
holding a finished run is refused unless the run resumes it or asks for a fresh start (which empties it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from spec_helpers import ROOT, compose_spec

from marin_rl.config.spec import SpecError
from marin_rl.runlog.run_lock import (
    LOCK_FILE,
    RunFolderError,
    RunLock,
    check_folder_reusable,
    clear_run_folder,
    previous_run_entries,
)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def finished_run(folder):
    """What a finished run leaves, plus Hydra's own files."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("old: 1\n")
    (folder / "launch.log").write_text("old log\n")
    (folder / "spec.yaml").write_text("mode: rl\n")
    (folder / "summary.json").write_text('{"status": "completed"}')
    (folder / "checkpoints" / "step-0000006").mkdir(parents=True)
    return folder


def test_second_lock_is_refused_naming_the_owner_and_released_after(tmp_path):
    with RunLock(tmp_path):
        owner = json.loads((tmp_path / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        with pytest.raises(RunFolderError, match=f"in use by another run: pid {os.getpid()} on host "):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_FILE).exists()
    with RunLock(tmp_path):  # free again
        pass


def test_stale_lock_is_taken_over_but_another_hosts_lock_is_not(tmp_path):
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "started": 0}
    (tmp_path / LOCK_FILE).write_text(json.dumps(stale))
    lock = RunLock(tmp_path).acquire()
    assert lock.took_over == stale and json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": dead_pid(), "host": "elsewhere", "started": 0}))
    with pytest.raises(RunFolderError, match=f"on host elsewhere.*delete {tmp_path / LOCK_FILE}"):
        RunLock(tmp_path).acquire()


def test_finished_folder_is_refused_unless_resumed_or_overwritten(tmp_path):
    run = finished_run(tmp_path / "run")
    assert [p.name for p in previous_run_entries(run)] == ["checkpoints", "spec.yaml", "summary.json"]
    with pytest.raises(RunFolderError, match="already holds a run .*resume=auto.*overwrite=true"):
        check_folder_reusable(run, "never", overwrite=False)
    check_folder_reusable(run, "auto", overwrite=False)
    check_folder_reusable(run, str(run), overwrite=False)  # resume=<this folder> continues it
    with pytest.raises(RunFolderError, match="would delete resume="):
        check_folder_reusable(run, str(run), overwrite=True)
    with pytest.raises(SpecError, match="set only one of them"):
        compose_spec(["overwrite=true", "resume=auto"])

    with RunLock(run):
        clear_run_folder(run)
        assert sorted(p.name for p in run.iterdir()) == [".hydra", "launch.log", LOCK_FILE]
        assert (run / "launch.log").read_text() == ""
    check_folder_reusable(run, "never", overwrite=False)  # now empty for a fresh run


def launch(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), *args], cwd=ROOT, env=dict(os.environ, HYDRA_FULL_ERROR="0"),
        capture_output=True, text=True, timeout=120,
    )


def test_cli_refuses_a_locked_folder_and_a_finished_one_before_anything_starts(tmp_path):
    run = finished_run(tmp_path / "run")
    out = launch(f"hydra.run.dir={run}")
    assert out.returncode == 2 and "error: run folder" in out.stderr and "already holds a run" in out.stderr
    assert (run / "spec.yaml").read_text() == "mode: rl\n"  # the finished run's files are untouched
    assert (run / "checkpoints" / "step-0000006").is_dir()

    with RunLock(run):  # a live owner (this test process) holds the folder
        out = launch(f"hydra.run.dir={run}", "resume=auto")
    assert out.returncode == 2 and f"in use by another run: pid {os.getpid()}" in out.stderr
    assert "Traceback" not in out.stderr
