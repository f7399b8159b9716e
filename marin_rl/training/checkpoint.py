"""Checkpoints of the trainer state through Levanter's TensorStore serialization, written atomically.

Layout of one checkpoint folder (e.g. <run_dir>/checkpoints/step-0000010):
    model/            the policy (Levanter `save_checkpoint`, TensorStore/zarr, one array per leaf)
    train_state/      optimizer state, step counter, PRNG key
    model_config.json the ModelConfig, so export/eval can rebuild the network without the run config
    extra.json        caller's extra state (replay buffer position, sampler counters, ...), JSON
    MANIFEST.json     size and SHA-256 of every file above (training/checkpoint_manifest.py); checked on load
    COMPLETE          written last; only folders with it count as checkpoints

Everything is written into "<name>.tmp" and renamed into place, so a run killed mid-save leaves either the old
checkpoint or a ".tmp" folder that `latest_checkpoint` ignores (and the next save removes). A finished checkpoint
whose files were later lost or changed fails verification: `latest_checkpoint` skips it (saying so), restores refuse
it, and pruning never deletes the newest checkpoint that verifies.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import haliax as hax
import jax
from levanter.checkpoint import load_checkpoint as lev_load_checkpoint
from levanter.checkpoint import save_checkpoint as lev_save_checkpoint

from marin_rl.config.spec import ModelConfig
from marin_rl.models.arrays import local_mesh
from marin_rl.training.checkpoint_manifest import (
    fallback_message,
    newest_verified,
    verify_checkpoint,
    write_manifest,
)
from marin_rl.training.mesh import PARAMETER_MAPPING
from marin_rl.training.multihost import sync_processes

COMPLETE_MARKER = "COMPLETE"
MODEL_DIR = "model"
TRAIN_STATE_DIR = "train_state"
MODEL_CONFIG_FILE = "model_config.json"
EXTRA_FILE = "extra.json"
TMP_SUFFIX = ".tmp"


class _DropNoneLeafWarnings(logging.Filter):
    """Levanter warns once per None leaf (absent biases) of a restore template; those are expected, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Unknown leaf type <class 'NoneType'>" not in record.getMessage()


logging.getLogger("levanter.tensorstore_serialization").addFilter(_DropNoneLeafWarnings())
logger = logging.getLogger(__name__)


def checkpoint_path(checkpoint_dir: str | Path, step: int) -> Path:
    """Conventional folder of the checkpoint at `step` inside `checkpoint_dir` (zero-padded so names sort)."""
    return Path(checkpoint_dir) / f"step-{int(step):07d}"


def is_checkpoint(path: str | Path) -> bool:
    """True for a finished checkpoint folder (COMPLETE marker present, not a .tmp folder)."""
    path = Path(path)
    return path.is_dir() and not path.name.endswith(TMP_SUFFIX) and (path / COMPLETE_MARKER).is_file()


def checkpoint_step(path: str | Path) -> int:
    """The step recorded in a checkpoint's COMPLETE marker."""
    return int(json.loads((Path(path) / COMPLETE_MARKER).read_text())["step"])


def checkpoint_vocab_size(path: str | Path) -> int | None:
    """Vocabulary size of the saved policy (None for checkpoints of models without a vocab axis)."""
    return json.loads((Path(path) / COMPLETE_MARKER).read_text()).get("vocab_size")


def list_checkpoints(checkpoint_dir: str | Path) -> list[Path]:
    """Finished checkpoints in `checkpoint_dir`, oldest step first."""
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return []
    found = [p for p in checkpoint_dir.iterdir() if is_checkpoint(p)]
    return sorted(found, key=lambda p: (checkpoint_step(p), p.name))


def latest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The finished checkpoint with the highest step in `checkpoint_dir` that verifies, or None (warns on skips)."""
    chosen, rejected = newest_verified(list_checkpoints(checkpoint_dir))
    if rejected:
        logger.warning(fallback_message(chosen, rejected))
    return chosen


def _train_state_tree(state: Any) -> dict[str, Any]:
    return {"opt_state": state.opt_state, "step": state.step, "key": state.key}


def save_checkpoint(
    path: str | Path,
    state: Any,
    extra: dict | None = None,
    *,
    model_config: ModelConfig | None = None,
    keep: int | None = None,
) -> Path:
    """Write `state` (a TrainerState: model, opt_state, step, key) + `extra` (JSON) to `path`, atomically.

    keep: afterwards delete the oldest finished checkpoints next to `path` so that at most `keep` remain.
    """
    path = Path(path)
    if path.name.endswith(TMP_SUFFIX):
        raise ValueError(
            f"checkpoint path {path} must not end in {TMP_SUFFIX!r} (reserved for partial writes)"
        )
    step = int(jax.device_get(state.step))
    extra = {} if extra is None else extra
    extra_json = json.dumps(extra, indent=1, sort_keys=True)  # fail before writing anything if not JSON-able
    tmp = path.with_name(path.name + TMP_SUFFIX)
    # A trainer spanning JAX processes: each process writes its own shards, process 0 alone the rest, in order.
    lead = jax.process_index() == 0
    if lead:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    sync_processes(f"checkpoint {tmp} created")
    with hax.partitioning.set_mesh(local_mesh()):
        lev_save_checkpoint(state.model, step, tmp / MODEL_DIR, is_temporary=False)
        lev_save_checkpoint(_train_state_tree(state), step, tmp / TRAIN_STATE_DIR, is_temporary=False)
    sync_processes(f"checkpoint {tmp} shards written")
    if lead:
        _finish_checkpoint(tmp, path, state, step, extra_json, model_config, keep)
    sync_processes(f"checkpoint {path} in place")
    return path


def _finish_checkpoint(
    tmp: Path, path: Path, state: Any, step: int, extra_json: str, model_config: ModelConfig | None, keep: int | None
) -> None:
    """Write extra.json, model_config.json, MANIFEST and COMPLETE into `tmp`, rename it to `path`, prune."""
    (tmp / EXTRA_FILE).write_text(extra_json)
    if model_config is not None:
        (tmp / MODEL_CONFIG_FILE).write_text(model_config.model_dump_json(indent=1))
    write_manifest(tmp)
    vocab = getattr(
        state.model, "Vocab", None
    )  # HF models may pad the vocab past len(tokenizer): keep its size
    marker = {"step": step, "time": time.time(), "vocab_size": None if vocab is None else vocab.size}
    (tmp / COMPLETE_MARKER).write_text(json.dumps(marker))
    if path.exists():  # re-saving the same step: move the old one aside first so the rename cannot fail
        old = path.with_name(path.name + ".old" + TMP_SUFFIX)
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, path)
    if keep is not None:
        prune_checkpoints(path.parent, keep, just_saved=path)


def prune_checkpoints(checkpoint_dir: str | Path, keep: int, just_saved: Path | None = None) -> list[Path]:
    """Delete all but the newest `keep` finished checkpoints (and stale .tmp folders); returns what was deleted.

    The newest checkpoint that verifies is never deleted, even when newer (damaged) ones outnumber `keep`.
    """
    if keep < 1:
        raise ValueError(f"train.keep_checkpoints={keep} must be >= 1")
    checkpoint_dir = Path(checkpoint_dir)
    found = list_checkpoints(checkpoint_dir)
    # save_checkpoint passes the checkpoint it just wrote and hashed: no second read when it is the newest
    newest_good = just_saved if found and found[-1] == just_saved else newest_verified(found)[0]
    doomed = [p for p in found[:-keep] if p != newest_good]
    doomed += [p for p in checkpoint_dir.iterdir() if p.is_dir() and p.name.endswith(TMP_SUFFIX)]
    for p in doomed:
        shutil.rmtree(p, ignore_errors=True)
    return doomed


def _require_checkpoint(path: Path) -> None:
    if not is_checkpoint(path):
        raise FileNotFoundError(
            f"{path} is not a finished marin-rl checkpoint (no {COMPLETE_MARKER} marker; a killed save leaves "
            f"'{path.name}{TMP_SUFFIX}' instead)"
        )
    verify_checkpoint(path)  # a lost chunk file would otherwise load as zeros


def _placed_like(restored: Any, template: Any) -> Any:
    """Put restored arrays where the template's concrete arrays live (same sharding -> the jitted step does not
    recompile); leaves of an abstract template keep the loader's placement."""

    def place(x, like):
        if isinstance(x, jax.Array) and isinstance(like, jax.Array) and x.sharding != like.sharding:
            return jax.device_put(x, like.sharding)
        return x

    return jax.tree.map(place, restored, template)


def _load(template: Any, folder: Path, mesh: Any) -> Any:
    """Levanter's TensorStore load; with a mesh, every device reads only its own shard of each NamedArray
    (parameter mapping of training/mesh.py), whatever mesh wrote the checkpoint: that is the resharding."""
    mapping = None if mesh is None else PARAMETER_MAPPING
    mesh = local_mesh() if mesh is None else mesh
    with hax.partitioning.set_mesh(mesh):
        return lev_load_checkpoint(template, str(folder), discover_latest=False, axis_mapping=mapping, mesh=mesh)


def restore_model(path: str | Path, template_model: Any, *, mesh: Any = None) -> Any:
    """The policy saved in checkpoint `path`, shaped like `template_model` (concrete or from eqx.filter_eval_shape);
    mesh: load it sharded over this trainer mesh (any mesh may have written it)."""
    path = Path(path)
    _require_checkpoint(path)
    return _load_model(path, template_model, mesh)


def _load_model(path: Path, template_model: Any, mesh: Any = None) -> Any:
    return _placed_like(_load(template_model, path / MODEL_DIR, mesh), template_model)


def restore_checkpoint(path: str | Path, template_state: Any, *, mesh: Any = None) -> tuple[Any, dict]:
    """(state, extra) from checkpoint `path`; template_state gives the structure (e.g. Trainer.init_state(model));
    mesh: load sharded over this trainer mesh (Trainer.mesh), whatever mesh wrote the checkpoint."""
    path = Path(path)
    _require_checkpoint(path)
    model = _load_model(path, template_state.model, mesh)
    template_rest = _train_state_tree(template_state)
    rest = _placed_like(_load(template_rest, path / TRAIN_STATE_DIR, mesh), template_rest)
    state = dataclasses.replace(template_state, model=model, **rest)
    extra = json.loads((path / EXTRA_FILE).read_text()) if (path / EXTRA_FILE).exists() else {}
    return state, extra


def read_model_config(path: str | Path) -> ModelConfig:
    """The ModelConfig stored next to checkpoint `path` (error if it was saved without one)."""
    file = Path(path) / MODEL_CONFIG_FILE
    if not file.exists():
        raise FileNotFoundError(f"{file} is missing: save_checkpoint(..., model_config=...) writes it")
    return ModelConfig.model_validate_json(file.read_text())


def read_extra(path: str | Path) -> dict:
    """The JSON `extra` dict of checkpoint `path`."""
    file = Path(path) / EXTRA_FILE
    return json.loads(file.read_text()) if file.exists() else {}
