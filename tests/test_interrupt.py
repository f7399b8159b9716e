"""Ctrl-C ends an RL run as `interrupted` with one line naming the resume command; no traceback, and no Ray
error line about max_restarts (the rollout workers get actor names, not handles)."""

from __future__ import annotations

import contextlib
import os
import signal

from e2e import SHORT_RUN, kill_group, start, summary, wait_for


@contextlib.contextmanager
def children_take_ctrl_c():
    """Children started inside get SIGINT at its default, even where this process ignores it.

    A shell starts a background job (`make test &` in a script) with SIGINT ignored, a child inherits that, and
    Python then installs no KeyboardInterrupt handler: the run would rightly ignore the test's Ctrl-C (seen in
    `make test` started that way). A handled signal is reset to the default at exec, an ignored one is not.
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_records_interrupted_and_prints_the_resume_command_once(tmp_path):
    run, log = tmp_path / "run", tmp_path / "log.txt"
    with children_take_ctrl_c():
        proc = start(*SHORT_RUN, "sft.steps=2", "train.steps=50", f"hydra.run.dir={run}", log=log)
    try:
        wait_for(lambda: "evaluating the starting policy" in log.read_text(), 240, proc, "the first evaluation")
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
        proc.wait(timeout=120)
    finally:
        kill_group(proc)
    text = log.read_text()
    assert proc.returncode == 130, text[-3000:]
    assert summary(run)["status"] == "interrupted"
    hint = [line for line in text.splitlines() if line.startswith("interrupted.")]
    assert len(hint) == 1 and hint[0].endswith(f"resume=auto hydra.run.dir={run}"), text[-3000:]
    assert "Traceback" not in text and "Fatal Python error" not in text
    assert "max_restarts" not in text  # Ray's error line for actor handles among restartable-actor arguments
    assert not (run / "run.lock").exists()  # released on the way out
