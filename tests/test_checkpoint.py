"""Checkpoints: resume is bit-identical, saves are atomic, old ones are pruned, extra state round-trips."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_policy import MODEL, arithmetic_batch, count_compiles, tiny_model, tiny_trainer

from marin_rl.training import checkpoint as ckpt


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def test_resume_from_checkpoint_is_bit_identical(tmp_path):
    model, tokenizer, _ = tiny_model()
    trainer = tiny_trainer(None)
    batches = [arithmetic_batch(tokenizer, seed=10 + i) for i in range(4)]

    straight = trainer.init_state(model, jax.random.PRNGKey(7))
    for batch in batches:
        straight, _ = trainer.train_step(straight, batch)

    first_half = trainer.init_state(model, jax.random.PRNGKey(7))
    for batch in batches[:2]:
        first_half, _ = trainer.train_step(first_half, batch)
    extra = {"replay": {"cursor": 17, "ids": [3, 5]}, "sampler_version": 2}
    saved = ckpt.save_checkpoint(
        ckpt.checkpoint_path(tmp_path, 2), first_half, extra, model_config=MODEL, keep=2
    )

    template = trainer.init_state(model, jax.random.PRNGKey(0))  # different key: must be overwritten
    resumed, extra_back = ckpt.restore_checkpoint(saved, template)
    assert extra_back == extra
    assert int(resumed.step) == 2
    assert all(np.array_equal(a, b) for a, b in zip(leaves(resumed), leaves(first_half), strict=True))
    with count_compiles() as compiles:
        for batch in batches[2:]:
            resumed, _ = trainer.train_step(resumed, batch)
    assert compiles == []  # the restored state hits the step compiled for the fresh one (same placement)

    assert all(
        np.array_equal(a, b) for a, b in zip(leaves(resumed.model), leaves(straight.model), strict=True)
    )
    assert all(
        np.array_equal(a, b)
        for a, b in zip(leaves(resumed.opt_state), leaves(straight.opt_state), strict=True)
    )
    assert trainer.traces == 1  # the restored state reuses the compiled step
    assert ckpt.read_model_config(saved) == MODEL
    assert ckpt.checkpoint_vocab_size(saved) == len(tokenizer)


def test_latest_ignores_partial_saves_and_keep_prunes_old(tmp_path):
    model, _, _ = tiny_model()
    state = tiny_trainer(None).init_state(model)
    assert ckpt.latest_checkpoint(tmp_path) is None
    for step in (1, 2, 3):
        state = dataclasses.replace(state, step=jnp.asarray(step, jnp.int32))
        ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, step), state, {"step": step}, keep=2)
    assert [ckpt.checkpoint_step(p) for p in ckpt.list_checkpoints(tmp_path)] == [2, 3]

    # a save killed half-way: a .tmp folder with data but no COMPLETE marker, and a folder lacking the marker
    partial = tmp_path / "step-0000004.tmp"
    (partial / "model").mkdir(parents=True)
    unmarked = tmp_path / "step-0000005"
    unmarked.mkdir()
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.checkpoint_path(tmp_path, 3)
    with pytest.raises(FileNotFoundError, match="not a finished"):
        ckpt.restore_checkpoint(unmarked, state)
    with pytest.raises(ValueError, match="reserved"):
        ckpt.save_checkpoint(partial, state)
    with pytest.raises(TypeError):
        ckpt.save_checkpoint(tmp_path / "bad", state, {"x": object()})  # not JSON: fails before writing
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad.tmp").exists()

    # re-saving the same step replaces it; the next keep-pruning removes stale .tmp folders
    ckpt.save_checkpoint(ckpt.checkpoint_path(tmp_path, 3), state, {"again": True}, keep=2)
    assert ckpt.read_extra(ckpt.checkpoint_path(tmp_path, 3)) == {"again": True}
    assert not partial.exists()
