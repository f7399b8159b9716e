"""End-to-end RL runs on Ray (short, real): sync, reproducibility from the seed, resume after a kill, in-flight with a
killed rollout worker, everything filtered with two workers, one-step-off pipelining, and the real-data path."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from e2e import SHORT_RUN, SHORT_RUN_ANY_ENV, kill_group, launch, metrics, start, summary, wait_for

from marin_rl.runtime.ray_security import exposed, listening_sockets
from marin_rl.runtime.weight_sync import SHM_DIR_PREFIX, SHM_ROOT
from marin_rl.training.checkpoint import checkpoint_step, latest_checkpoint, list_checkpoints

pytestmark = pytest.mark.timeout(900)


# The sync run of this module: 4 steps, a checkpoint every 2, a KL term (so the reference policy matters).
SYNC = [*SHORT_RUN, "train.steps=4", "train.checkpoint_every=2", "loss.kl.coef=0.05"]
# the only fields two equal runs may differ in: wall-clock figures
VOLATILE = ("time/", "throughput/", "time_s")


def steady(rows: list[dict]) -> list[dict]:
    """metrics.jsonl rows without their wall-clock fields."""
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def weights_digest(run_dir) -> dict[str, str]:
    """sha256 of every array file of the newest checkpoint (from its manifest; metadata.json holds a timestamp)."""
    manifest = json.loads((latest_checkpoint(run_dir / "checkpoints") / "MANIFEST.json").read_text())
    return {
        path: entry["sha256"] for path, entry in manifest["files"].items()
        if path.startswith(("model/", "train_state/")) and not path.endswith("metadata.json")
    }


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    """The run, compiling every program into a compile cache of its own (which the seed test's rerun loads)."""
    run_dir = tmp_path_factory.mktemp("sync") / "run"
    cache_dir = run_dir.parent / "compile_cache"
    out = launch(*SYNC, f"hardware.compile_cache.dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out


def test_sync_run_end_to_end(sync_run):
    run_dir, out = sync_run
    s = summary(run_dir)
    assert s["status"] == "completed" and s["steps"] == 4
    assert s["eval_before_rl"]["n_problems"] == 16 and s["eval_before_rl"]["version"] == 0
    assert s["eval_after_rl"]["version"] == 4  # the final weights, not an earlier version
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # the summary's rate is total sampled tokens over total sampling seconds, summed over steps
    tokens, seconds = sum(r["throughput/sampled_tokens"] for r in rows), sum(r["time/sample_s"] for r in rows)
    assert s["tokens_per_second"] == pytest.approx(tokens / seconds)
    trained = [r for r in rows if not r["train/skipped"]]  # a step whose groups were all filtered is skipped
    assert trained
    for r in rows:
        assert r["replay/max_staleness_used"] == 0  # sync = on-policy
        assert r["rollout/multi_version_fraction"] == 0.0
        assert r["rollout/sampled"] >= 32  # a batch of 8 prompts x 4, plus dynamic-sampling rounds
    for r in trained:
        for key in ("reward/mean", "loss/total", "train/grad_norm", "time/weight_publish_s", "filter/zero_variance_frac"):
            assert key in r, key
    assert (run_dir / "curves.png").stat().st_size > 0
    assert [checkpoint_step(p) for p in list_checkpoints(run_dir / "checkpoints")] == [2, 4]
    assert (run_dir / "spec.yaml").exists() and (run_dir / "wandb").is_dir()
    assert "eval pass@1 after RL" in out.stdout
    assert s["programs"]["compiled"] > 0 and f"{s['programs']['compiled']} compiled" in out.stdout  # end table
    # rollout.weight_sync.method=auto on one node: the shared-memory ring, said and recorded, gone after the run
    if SHM_ROOT.is_dir():  # a machine without /dev/shm takes the object store (tests/test_preflight.py)
        assert "rollout.weight_sync.method=auto chose shared_memory" in out.stdout
        assert s["weight_sync_method"] == "shared_memory"
        slots = re.search(r"slots in (\S+), removed when the run ends", out.stdout)
        assert slots and slots.group(1).startswith(str(SHM_ROOT / SHM_DIR_PREFIX)) and not os.path.exists(slots[1])


def stamps(compile_cache_dir) -> dict[str, int]:
    """The access time JAX's compile cache stamps (in an `<key>-atime` file) on each program it stores or loads."""
    return {p.name: int.from_bytes(p.read_bytes(), "little") for p in compile_cache_dir.glob("*-atime")}


def test_the_seed_reproduces_a_sync_run(sync_run, tmp_path):
    """Same seed, same machine: identical metrics (wall-clock fields aside) and bit-identical final weights. The
    first run moves its weights through shared memory (method=auto on one node), the second through the Ray object
    store: the channel changes nothing the run computes. The second loads every program the first compiled
    (hardware.compile_cache): a loaded program computes what the compiled one did."""
    first, _ = sync_run
    cache_dir = first.parent / "compile_cache"
    compiled = stamps(cache_dir)
    out = launch(*SYNC, "rollout.weight_sync.method=object_store", f"hardware.compile_cache.dir={cache_dir}",
                 f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    reloaded = stamps(cache_dir)
    assert compiled and set(reloaded) == set(compiled)  # nothing new compiled
    assert all(reloaded[name] > stamp for name, stamp in compiled.items())  # every program loaded
    programs, reran = summary(first)["programs"], summary(tmp_path)["programs"]  # trainer + worker, as counted
    assert programs["compiled"] >= len(compiled)  # the first run's worker loads some that its trainer compiled
    assert reran["compiled"] == 0 and reran["loaded"] == programs["compiled"] + programs["loaded"]
    assert summary(tmp_path)["weight_sync_method"] == "object_store"
    assert steady(metrics(tmp_path)) == steady(metrics(first))
    assert weights_digest(tmp_path) == weights_digest(first)
    assert summary(tmp_path)["eval_after_rl"]["pass_at_1"] == summary(first)["eval_after_rl"]["pass_at_1"]


# One-step-off pipelining (rollout.mode=one_step_off): 3 steps, dynamic sampling on (the recipe's DAPO loss), so
# extra rounds are sampled too; a short evaluation keeps the run near a minute.
ONE_STEP_OFF = [*SHORT_RUN, "rollout.mode=one_step_off", "train.steps=3", "train.checkpoint_every=0",
                "train.eval_prompts=4"]


@pytest.fixture(scope="module")
def one_step_off_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one_step_off") / "run"
    out = launch(*ONE_STEP_OFF, f"hydra.run.dir={run_dir}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir


def test_one_step_off_trains_every_step_after_the_first_on_rollouts_one_step_old(one_step_off_run):
    s = summary(one_step_off_run)
    assert s["status"] == "completed" and s["steps"] == 3 and s["eval_after_rl"]["version"] == 3
    rows = metrics(one_step_off_run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        lag = 0 if r["step"] == 1 else 1  # steps 1 and 2 both train on weights 0; then always one step behind
        drawn = r["rollout/sampled"] // 4  # groups of 4 (extra rounds included)
        assert r["replay/staleness_hist"] == {str(lag): drawn}, r["replay/staleness_hist"]
        assert r["replay/max_staleness_used"] == lag
        assert r["rollout/min_version"] == max(r["step"] - 2, 0)
        assert r["rollout/multi_version_fraction"] == 0.0  # no swap inside a round


@pytest.mark.slow  # a second run of ONE_STEP_OFF (~1-3 min on 2 cores): make test-slow
def test_the_seed_reproduces_a_one_step_off_run(one_step_off_run, tmp_path):
    """The weights a round is sampled with and the groups a step draws do not depend on timing: same seed,
    identical metrics and bit-identical final weights, as in sync mode."""
    out = launch(*ONE_STEP_OFF, f"hydra.run.dir={tmp_path}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert steady(metrics(tmp_path)) == steady(metrics(one_step_off_run))
    assert weights_digest(tmp_path) == weights_digest(one_step_off_run)


def test_killed_run_resumes_to_the_uninterrupted_result(sync_run, tmp_path):
    """Killed after its step-2 checkpoint and resumed with resume=auto, a sync run ends exactly where the
    uninterrupted run ends: the data stream and sampling keys are named by (seed, worker, version), and the KL
    reference is the saved starting policy, not the restored one."""
    uninterrupted, _ = sync_run
    log = tmp_path.with_name(tmp_path.name + "-log.txt")  # outside: a run folder must hold nothing else
    args = [*SYNC, f"hydra.run.dir={tmp_path}"]
    proc = start(*args, log=log)
    try:
        # polled often: a step of this run takes ~0.15 s, so checkpoint 4 may follow 2 within half a second
        wait_for(
            lambda: latest_checkpoint(tmp_path / "checkpoints") is not None, 400, proc, "checkpoint 2", every_s=0.02
        )
    finally:
        kill_group(proc)
    assert not (tmp_path / "summary.json").exists()  # killed hard: nothing claims the run finished
    assert checkpoint_step(latest_checkpoint(tmp_path / "checkpoints")) == 2, "killed too late to test a resume"
    extra = json.loads((latest_checkpoint(tmp_path / "checkpoints") / "extra.json").read_text())
    wall_before_kill = extra["wall_seconds_before_resume"]
    out = launch(*args, "resume=auto")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resumed from" in out.stdout and "at step 2" in out.stdout
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 4 and s["resumed_from"]
    assert 0 < wall_before_kill < s["wall_seconds"]  # wall time counts the killed part up to its checkpoint too
    resumed, reference = steady(metrics(tmp_path)), steady(metrics(uninterrupted))
    assert resumed == reference
    assert weights_digest(tmp_path) == weights_digest(uninterrupted)
    # the first step after the resume measures KL to the starting policy: with the restored policy as reference
    # it would be exactly 0
    assert [r for r in resumed if r["step"] == 3][0]["loss/kl"] > 0


def test_everything_filtered_inflight_with_two_workers_completes_and_checkpoints(tmp_path):
    """Every reward 0 (correct answers are worth nothing): every group is filtered, every step is skipped. The
    in-flight run must not stall, both workers share the prompts, and checkpoints still come on cadence."""
    out = launch(
        *SHORT_RUN, "rollout.mode=inflight", "hardware.num_rollout_workers=2", "ray.num_cpus=3", "sft.warmstart=false",
        "env.components.0.reward.correct=0.0", "loss.overlong.penalty=false",  # no length shaping: all rewards 0
        "train.steps=3", "train.checkpoint_every=1", "train.eval_prompts=4",
        f"hydra.run.dir={tmp_path}",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 3
    rows = metrics(tmp_path)
    assert [r["train/skipped"] for r in rows] == [1, 1, 1]
    assert all(r["filter/kept_groups"] == 0 and r["filter/dropped_groups"] >= 8 for r in rows)
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path / "checkpoints")] == [2, 3]


def test_inflight_run_swaps_weights_and_survives_a_killed_worker(tmp_path):
    """In-flight updates (weights swapped between decode chunks, staleness bounded), and a rollout worker killed
    mid-run: Ray restarts it, it reloads the newest weights, and the run completes every step."""
    log = tmp_path.with_name(tmp_path.name + "-log.txt")  # outside: a run folder must hold nothing else
    proc = start(
        # No warm-start: the random policy rarely stops early, so generations of up to 96 tokens take longer than a
        # train step and are overtaken by the next weights.
        *SHORT_RUN, "rollout.mode=inflight", "rollout.max_staleness=1", "train.steps=8", "sampler.decode_chunk=1",
        "sampler.max_new_tokens=96", "sft.warmstart=false", f"hydra.run.dir={tmp_path}",
        # the trainer then trains on each batch while the worker samples the next (no waits for extra rounds)
        "loss.dynamic_sampling.enabled=false", log=log,
    )
    try:
        wait_for(lambda: len(metrics(tmp_path)) >= 2, 400, proc, "two RL steps")
        listeners = listening_sockets(proc.pid)  # Ray, its workers, grading processes, wandb: all the run started
        assert any(x.process == "gcs_server" for x in listeners) and exposed(listeners) == [], listeners
        pid = int((tmp_path / "workers" / "rollout_worker_0.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            kill_group(proc)
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 8
    assert s["worker_restarts"] >= 1
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert all(r["replay/max_staleness_used"] <= 1 for r in rows)
    assert all("replay/dropped_stale" in r for r in rows)
    assert any(r["rollout/multi_version_fraction"] > 0 for r in rows), [r["rollout/multi_version_fraction"] for r in rows]


def test_math500_and_gsm8k_take_steps_on_local_data(shared_data_dir, tmp_path):
    """The real-data path end to end with the tiny model, both datasets mixed in one run (learning is not
    expected at this size; loading, prompting, sampling, grading and training steps are)."""
    out = launch(
        *SHORT_RUN_ANY_ENV, "env=math_mix", f"env.data_dir={shared_data_dir}", "env.components.0.split_from_test=true",
        "sft.warmstart=false", "model.max_seq_len=384", "sampler.max_new_tokens=32", "train.steps=2",
        "train.eval_prompts=4", f"hydra.run.dir={tmp_path}",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = summary(tmp_path)
    assert s["status"] == "completed" and s["steps"] == 2
    assert set(s["eval_after_rl"]["by_env"]) == {"math500", "gsm8k"}
    # decontamination ran before the run: 4 GSM8K train questions share a 13-gram with GSM8K test
    assert s["decontam"]["by_env"] == {"math500": {"checked": 250, "dropped": 0},
                                       "gsm8k": {"checked": 7473, "dropped": 4}}
    assert "decontam/dropped = 4 of 7723 training problems" in out.stdout
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["filter/kept_groups"] + r["filter/dropped_groups"] >= 8 for r in rows)  # 8 prompts a step
