"""Ctrl-C ends an RL run as `interrupted` with one line naming the resume command; no traceback, and no Ray
error line about max_restarts (the rollout workers get actor names, not handles)."""

from __future__ import annotations

import os
import signal

from e2e import SHORT_RUN, kill_group, start, summary, wait_for


def test_ctrl_c_records_interrupted_and_prints_the_resume_command_once(tmp_path):
    run, log = tmp_path / "run", tmp_path / "log.txt"
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
