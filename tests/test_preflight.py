"""Errors a run can only hit late are found in the driver before Ray starts, each with one clear message:
data files, resume paths, checkpoint vs model shapes, non-finite numbers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from spec_helpers import ROOT, compose_spec
from tiny_policy import MODEL, tiny_model, tiny_trainer

from marin_rl.config.preflight import PreflightError, preflight, resume_checkpoint
from marin_rl.config.spec import SpecError
from marin_rl.training import checkpoint as ckpt

GOOD_GSM8K = {"question": "Tom has 2 apples and buys 3. How many?", "answer": "2+3=5\n#### 5"}


def gsm8k_dir(tmp_path, test_lines):
    """A local gsm8k folder: a valid train.jsonl and the given raw test.jsonl lines."""
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps(GOOD_GSM8K) + "\n")
    (folder / "test.jsonl").write_text("".join(line + "\n" for line in test_lines))
    return folder


@pytest.mark.parametrize(
    "lines, expected",
    [
        (None, "no such JSONL file"),
        ([json.dumps(GOOD_GSM8K), '{"question": "cut short'], "test.jsonl:2: not valid JSON"),
        ([json.dumps({"question": "no answer here"})], "test.jsonl:1: missing or empty string field(s) ['answer']"),
    ],
    ids=["missing-folder", "malformed-line", "missing-answer"],
)
def test_data_errors_are_found_before_ray(tmp_path, lines, expected):
    data_dir = tmp_path / "absent" if lines is None else gsm8k_dir(tmp_path, lines)
    spec = compose_spec(["env=gsm8k", f"env.data_dir={data_dir}"])
    with pytest.raises(PreflightError, match="env.components.0 \\(gsm8k\\)") as err:
        preflight(spec, tmp_path / "run")
    assert expected in str(err.value)


def test_actors_that_cannot_fit_the_local_ray_fail_before_it_starts(tmp_path, monkeypatch):
    """Two 1-CPU workers + a 1-CPU trainer on a 2-CPU private Ray: its placement group could never be reserved."""
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # as in a fresh launch: no Ray connected yet
    spec = compose_spec(["hardware.num_rollout_workers=2", "ray.num_cpus=2"])
    with pytest.raises(PreflightError, match="ask for 3 CPUs") as err:
        preflight(spec, tmp_path / "run")
    assert "hardware.num_rollout_workers=2" in str(err.value) and "ray.num_cpus=2" in str(err.value)
    fits = compose_spec(["hardware.num_rollout_workers=2", "hardware.rollout_resources.num_cpus=0.5", "ray.num_cpus=2"])
    preflight(fits, tmp_path / "run")


@pytest.mark.parametrize("config_class, refused", [("Qwen2Config", True), ("LlamaConfig", False)])
def test_shared_prompts_on_a_model_that_is_not_a_llama_fail_before_ray(tmp_path, config_class, refused):
    """Shared prompts run the unrolled Llama layers; the HF folder's architecture is read before any actor starts."""
    import transformers

    getattr(transformers, config_class)(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=4, vocab_size=100).save_pretrained(tmp_path / "hf")
    spec = compose_spec(["model.kind=hf", f"model.hf_path={tmp_path / 'hf'}", "ray.num_cpus=2"])
    if refused:
        with pytest.raises(PreflightError, match="'qwen2' model; allowed: hardware.trainer_shared_prompts=false"):
            preflight(spec, tmp_path / "run")
    else:
        preflight(spec, tmp_path / "run")
    preflight(compose_spec(["model.kind=hf", f"model.hf_path={tmp_path / 'hf'}", "ray.num_cpus=2",
                            "hardware.trainer_shared_prompts=false"]), tmp_path / "run")


def test_missing_resume_path_is_found_before_ray(tmp_path):
    with pytest.raises(PreflightError, match="no such run folder"):
        preflight(compose_spec([f"resume={tmp_path / 'nope'}"]), tmp_path / "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PreflightError, match="no finished checkpoint under"):
        preflight(compose_spec([f"resume={tmp_path / 'empty'}"]), tmp_path / "run")


def save_tiny(run_dir, step):
    """A checkpoint of the tests' tiny model (hidden_dim 32) at `step` under run_dir/checkpoints."""
    import dataclasses

    import jax.numpy as jnp

    state = tiny_trainer(None).init_state(tiny_model()[0])
    state = dataclasses.replace(state, step=jnp.asarray(step, jnp.int32))
    return ckpt.save_checkpoint(ckpt.checkpoint_path(run_dir / "checkpoints", step), state, model_config=MODEL)


def test_checkpoint_shapes_that_differ_from_the_model_config_are_named(tmp_path):
    save_tiny(tmp_path / "old", 3)
    fitting = [f"model.{k}={getattr(MODEL, k)}" for k in ("hidden_dim", "intermediate_dim", "max_seq_len")]
    assert resume_checkpoint(compose_spec([f"resume={tmp_path / 'old'}", *fitting]), tmp_path / "run")
    spec = compose_spec([f"resume={tmp_path / 'old'}", "model.hidden_dim=64"])  # the checkpoint has 32
    with pytest.raises(PreflightError) as err:
        preflight(spec, tmp_path / "run")
    message = str(err.value)
    assert "the model config differs from the checkpoint's" in message
    assert "model.hidden_dim=64 here, 32 in the checkpoint" in message


def test_resume_auto_skips_a_damaged_checkpoint_and_refuses_when_none_verifies(tmp_path, capsys):
    run = tmp_path / "run"
    fitting = [f"model.{k}={getattr(MODEL, k)}" for k in ("hidden_dim", "intermediate_dim", "max_seq_len")]
    spec = compose_spec(["resume=auto", *fitting])
    assert resume_checkpoint(spec, run) is None  # nothing yet: resume=auto starts fresh
    first, second = save_tiny(run, 1), save_tiny(run, 2)
    (second / "model/lm_head/weight/0.0").unlink()
    assert resume_checkpoint(spec, run) == first
    assert f"falling back to {first}" in capsys.readouterr().out
    (first / "extra.json").write_text('{"edited": 1}')  # same size would still differ by hash
    with pytest.raises(PreflightError, match="none of the 2 checkpoints"):
        resume_checkpoint(spec, run)


@pytest.mark.parametrize("override", ["optimizer.lr=inf", "loss.clip_eps_high=nan", "rollout.weight_sync.timeout_s=-inf"])
def test_non_finite_numbers_are_rejected(override):
    with pytest.raises(SpecError, match=f"{override.split('=')[0]}: Input should be a finite number"):
        compose_spec([override])


def test_cli_prints_one_message_and_never_starts_ray(tmp_path):
    data_dir = gsm8k_dir(tmp_path, ["not json"])
    out = subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "env=gsm8k", f"env.data_dir={data_dir}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT, env=dict(os.environ, HYDRA_FULL_ERROR="0"), capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: env.components.0 (gsm8k):") and "test.jsonl:1" in out.stderr
    assert "Traceback" not in out.stderr and "Ray" not in out.stdout + out.stderr


def test_shared_memory_weights_that_do_not_fit_in_dev_shm_are_refused_before_ray():
    from marin_rl.config.preflight import check_weight_slots, weight_slot_bytes
    from marin_rl.runtime.weight_sync import SHM_ROOT

    tiny = compose_spec(["recipe=quickstart", "rollout.weight_sync.method=shared_memory"])
    check_weight_slots(tiny)  # 3 x ~0.6 MB
    big = compose_spec(["recipe=math500_llama3_8b_dapo", "rollout.weight_sync.method=shared_memory"])
    if weight_slot_bytes(big) <= shutil.disk_usage(SHM_ROOT).free:
        pytest.skip(f"{SHM_ROOT} holds three copies of 8B weights here")
    with pytest.raises(PreflightError) as err:
        check_weight_slots(big)
    for needle in ("rollout.weight_sync.method=shared_memory", "3 copies of the weights need", "object_store"):
        assert needle in str(err.value), str(err.value)
    check_weight_slots(big.model_copy(update={"rollout": big.rollout.model_copy(
        update={"weight_sync": big.rollout.weight_sync.model_copy(update={"method": "object_store"})})}))


def test_weight_sync_auto_takes_shared_memory_only_where_every_actor_shares_the_node_and_dev_shm_has_room(
    monkeypatch, tmp_path
):
    from marin_rl.config import preflight
    from marin_rl.config.preflight import weight_slot_bytes, weight_sync_method
    from marin_rl.runtime import weight_sync

    monkeypatch.setattr(weight_sync, "SHM_ROOT", tmp_path)  # a /dev/shm of a chosen size
    local = compose_spec(["recipe=quickstart"])
    need = weight_slot_bytes(local)
    room = {"free": need}
    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(0, 0, room["free"]))
    assert local.rollout.weight_sync.method == "auto"
    method, why = weight_sync_method(local, alive_nodes=1)
    assert method == "shared_memory" and "one node" in why
    assert weight_sync_method(local, alive_nodes=2) == ("object_store", "this Ray has 2 nodes")  # a sweep's Ray
    cluster = compose_spec(["recipe=quickstart", "ray.address=10.0.0.1:6379"])
    assert weight_sync_method(cluster, alive_nodes=1)[0] == "object_store"
    named = compose_spec(["recipe=quickstart", "rollout.weight_sync.method=files"])
    assert weight_sync_method(named, alive_nodes=1)[0] == "files"  # a method set by name is kept
    room["free"] = need - 1  # e.g. Docker's 64 MiB /dev/shm under a larger model
    method, why = weight_sync_method(local, alive_nodes=1)
    assert method == "object_store" and f"{tmp_path} has" in why  # no SIGBUS mid-run: the object store instead
    monkeypatch.setattr(weight_sync, "SHM_ROOT", tmp_path / "none")
    assert weight_sync_method(local, alive_nodes=1) == ("object_store", f"this machine has no {tmp_path / 'none'}")


def test_the_driver_falls_back_to_the_object_store_when_auto_cannot_reserve_the_slots(monkeypatch, tmp_path):
    """The ring's pages are reserved before any actor starts; with auto a failed reservation (a tmpfs that other
    runs filled since the check) means the object store, with shared_memory set by name a clear error."""
    import errno

    from marin_rl.config.preflight import slot_bytes
    from marin_rl.runtime import driver, weight_sync
    from marin_rl.runtime.weight_sync import SHM_DIR_PREFIX, WeightSyncError

    make_shm_dir = weight_sync.make_shm_dir
    monkeypatch.setattr(weight_sync, "SHM_ROOT", tmp_path)
    monkeypatch.setattr(weight_sync, "make_shm_dir", lambda: make_shm_dir(tmp_path))
    spec, folder, why = driver.weight_channel(compose_spec(["recipe=quickstart"]), tmp_path, alive_nodes=1)
    assert spec.rollout.weight_sync.method == "shared_memory" and folder is not None
    assert sorted(p.name for p in Path(folder).iterdir()) == ["slot0", "slot1", "slot2"]
    assert {p.stat().st_size for p in Path(folder).iterdir()} == {slot_bytes(spec)}

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(weight_sync.os, "posix_fallocate", full)
    spec, folder, why = driver.weight_channel(compose_spec(["recipe=quickstart"]), tmp_path, alive_nodes=1)
    assert spec.rollout.weight_sync.method == "object_store" and folder is None and "no room" in why
    named = compose_spec(["recipe=quickstart", "rollout.weight_sync.method=shared_memory"])
    with pytest.raises(WeightSyncError, match="no room"):
        driver.weight_channel(named, tmp_path, alive_nodes=1)
    assert len(list(tmp_path.glob(f"{SHM_DIR_PREFIX}*"))) == 1  # the failed rings are removed, the first one stays


def test_slots_on_the_driver_node_are_unreachable_from_actors_placed_elsewhere():
    from marin_rl.runtime.driver import slots_unreachable

    assert slots_unreachable(True, "a", ["a", "a"]) is None
    assert "node(s) ['b']" in slots_unreachable(True, "a", ["a", "b"])  # auto: the object store instead
    with pytest.raises(ValueError, match="method=object_store or files"):
        slots_unreachable(False, "a", ["b"])
