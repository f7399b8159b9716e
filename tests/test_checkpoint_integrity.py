"""A damaged checkpoint (a data file deleted or truncated) is detected, skipped with a message, and never pruned
in favour of it; restores refuse it instead of loading zeros."""

from __future__ import annotations

import dataclasses
import logging

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_policy import MODEL, tiny_model, tiny_trainer

from marin_rl.training import checkpoint as ckpt
from marin_rl.training.checkpoint_manifest import MANIFEST_FILE, CheckpointCorruptError
from marin_rl.training.export import resolve_checkpoint

LM_HEAD_CHUNK = "model/lm_head/weight/0.0"  # the output layer's only data file for the tiny model


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def two_checkpoints(run_dir):
    """Steps 1 and 2 of the tiny model (different weights) under run_dir/checkpoints; returns the two states."""
    model, _, _ = tiny_model()
    base = tiny_trainer(None).init_state(model)
    states = []
    for step in (1, 2):
        moved = jax.tree.map(lambda x, s=step: x + 0.01 * s if eqx.is_inexact_array(x) else x, base.model)
        state = dataclasses.replace(base, model=moved, step=jnp.asarray(step, jnp.int32))
        ckpt.save_checkpoint(ckpt.checkpoint_path(run_dir / "checkpoints", step), state, {"step": step},
                             model_config=MODEL, keep=2)
        states.append(state)
    return states


def delete(path):
    path.unlink()


def truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


@pytest.mark.parametrize("damage", [delete, truncate], ids=["deleted", "truncated"])
def test_damaged_newest_checkpoint_falls_back_and_is_refused(tmp_path, caplog, damage):
    first, _ = two_checkpoints(tmp_path)
    ckpt_dir = tmp_path / "checkpoints"
    step1, step2 = ckpt.checkpoint_path(ckpt_dir, 1), ckpt.checkpoint_path(ckpt_dir, 2)
    assert (step2 / MANIFEST_FILE).is_file() and ckpt.latest_checkpoint(ckpt_dir) == step2
    damage(step2 / LM_HEAD_CHUNK)

    with caplog.at_level(logging.WARNING, logger="marin_rl.training.checkpoint"):
        assert ckpt.latest_checkpoint(ckpt_dir) == step1
    assert "lm_head/weight/0.0" in caplog.text and f"falling back to {step1}" in caplog.text
    assert resolve_checkpoint(tmp_path) == step1  # export picks the good one too

    with pytest.raises(CheckpointCorruptError, match="lm_head/weight/0.0"):
        ckpt.restore_checkpoint(step2, first)
    restored, extra = ckpt.restore_checkpoint(step1, first)
    assert extra == {"step": 1}
    assert all(np.array_equal(a, b) for a, b in zip(leaves(restored.model), leaves(first.model), strict=True))

    # rotation with keep=1 would delete step 1; it is the newest that verifies, so it stays
    ckpt.prune_checkpoints(ckpt_dir, keep=1)
    assert step1.is_dir() and step2.is_dir()


def test_checkpoint_without_manifest_does_not_verify(tmp_path):
    two_checkpoints(tmp_path)
    step2 = ckpt.checkpoint_path(tmp_path / "checkpoints", 2)
    (step2 / MANIFEST_FILE).unlink()
    assert ckpt.latest_checkpoint(tmp_path / "checkpoints") == ckpt.checkpoint_path(tmp_path / "checkpoints", 1)
    with pytest.raises(CheckpointCorruptError, match=MANIFEST_FILE):
        ckpt.restore_model(step2, tiny_model()[0])
