"""hardware.trainer_shared_prompts: each prompt runs through the trainer's layers once for all its responses, and
the log-probs, entropies, gradients and loss metrics equal the one-row-per-response forward's."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from spec_helpers import compose_spec
from tiny_policy import HARDWARE, MODEL, OPTIMIZER, TEMPERATURE, TRAIN, shared_prompt_batches, tiny_model

from marin_rl.config.spec import SpecError
from marin_rl.objectives import LossConfig
from marin_rl.training.logprobs import token_stats
from marin_rl.training.shared_prompts import row_members
from marin_rl.training.trainer import Trainer


def test_each_prompt_is_laid_out_once_with_its_responses():
    rs, plain, shared, metrics = shared_prompt_batches(seed=0)
    rows = shared.shared
    assert row_members([r.prompt_tokens for r in rs], 3) == [[0, 1, 2], [3, 4, 5]]
    G, P = rows.prompts_GP.shape
    _, N, T = rows.responses_GNT.shape
    assert (G, N) == (2, 3)
    for g in range(2):
        p = len(rs[3 * g].prompt_tokens)
        assert int(rows.prompt_lens_G[g]) == p
        assert list(np.asarray(rows.prompts_GP[g, :p])) == list(rs[3 * g].prompt_tokens)
        for k in range(3):
            r = rs[3 * g + k].response_tokens
            assert list(np.asarray(rows.responses_GNT[g, k, : len(r)])) == list(r)
    # response 4's tokens are predicted by: its prompt's tokens, the prompt's last one, then its own
    b, p, n = 4, len(rs[4].prompt_tokens), len(rs[4].response_tokens)
    source = np.asarray(rows.source_BL[b])
    assert list(source[1 : p + 1]) == [P + t for t in range(p)]
    assert list(source[p + 1 : p + n]) == [G * P + (1 * N + 1) * T + i for i in range(n - 1)]
    # fewer tokens through the layers than one row per response
    assert metrics["train/padded_tokens"] == G * P + G * N * T < plain.tokens.size


def same_prompt_and_an_empty_response(rs):
    """Group 1 asks group 0's prompt (one problem drawn twice in a step) and its first response is empty."""
    rs = [dataclasses.replace(r, prompt_tokens=rs[0].prompt_tokens) if i >= 3 else r for i, r in enumerate(rs)]
    empty = np.zeros(0, np.int32)
    rs[3] = dataclasses.replace(rs[3], response_tokens=empty, sampler_logp=np.zeros(0, np.float32), versions=empty)
    return rs


def test_groups_of_one_prompt_stay_groups_of_n():
    assert row_members([[1], [1], [1], [2], [1]], 2) == [[0, 1], [2, 4], [3]]
    _, _, shared, _ = shared_prompt_batches(seed=0, edit=same_prompt_and_an_empty_response)
    assert shared.shared.responses_GNT.shape[:2] == (2, 3)


@pytest.mark.parametrize("unroll, edit", [
    (False, None), (True, None), (True, same_prompt_and_an_empty_response),
])
def test_log_probs_and_entropies_equal_one_row_per_response(unroll, edit):
    """Both reference forwards (the layer scan and the unrolled layers) against the shared-prompt layout."""
    model, _, _ = tiny_model()
    rs, plain, shared, _ = shared_prompt_batches(seed=1, edit=edit)
    real = np.zeros(shared.tokens.shape, bool)  # its rows are padded to the layout's P + T, not plain's bucket
    for b, r in enumerate(rs):
        real[b, 1 : len(r.prompt_tokens) + len(r.response_tokens)] = True
    want = token_stats(model, plain.tokens, TEMPERATURE, None, unroll)
    want = jax.tree.map(lambda x: x[:, : real.shape[1]], want)  # causal: padding past L changes nothing before it
    got = token_stats(model, shared.tokens, TEMPERATURE, None, True, shared.shared)
    np.testing.assert_allclose(np.asarray(got.logp)[real], np.asarray(want.logp)[real], atol=2e-5)
    np.testing.assert_allclose(np.asarray(got.entropy)[real], np.asarray(want.entropy)[real], atol=2e-5)


def test_gradients_and_loss_metrics_equal_one_row_per_response():
    """With a KL term to a reference model: its log-probs run through the shared-prompt layout as well."""
    model, _, _ = tiny_model()
    hardware = HARDWARE.model_copy(update={"trainer_unroll_layers": True})
    loss = LossConfig(name="test", kl={"coef": 0.1})
    trainer = Trainer(MODEL, OPTIMIZER, loss, TRAIN, hardware, TEMPERATURE, reference_model=perturbed(model))
    _, plain, shared, _ = shared_prompt_batches(seed=2, groups=3, per_group=2)  # 3 prompts: not a multiple of anything
    want_grads, want_metrics = trainer.grads(model, plain)
    grads, metrics = trainer.grads(model, shared)
    for a, b in zip(jax.tree.leaves(want_grads), jax.tree.leaves(grads), strict=True):
        # a prompt's gradient is one sum over its responses instead of one per row: float32 reassociation
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=2e-5 * float(jnp.abs(a).max() + 1e-12))
    for key in want_metrics:
        np.testing.assert_allclose(metrics[key], want_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)


def perturbed(model):
    """A reference policy that differs from `model` (so the KL term is not zero)."""
    leaves, tree = jax.tree.flatten(model)
    keys = jax.random.split(jax.random.PRNGKey(7), len(leaves))
    return jax.tree.unflatten(tree, [
        x + 0.05 * jax.random.normal(k, x.shape, x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
        for x, k in zip(leaves, keys)
    ])


def test_shared_prompts_with_micro_batches_without_unrolled_layers_or_on_tpu_fail_validation():
    base = ["hardware=cpu", "train.batch_size=8", "rollout.n_generations=4", "hardware.trainer_shared_prompts=true"]
    with pytest.raises(SpecError, match=r"trainer_shared_prompts=true.*train\.micro_batch_size=4"):
        compose_spec([*base, "train.micro_batch_size=4"])
    with pytest.raises(SpecError, match="allowed on hardware.accelerator=tpu: false"):
        compose_spec([*base, "hardware.accelerator=tpu"])
    with pytest.raises(SpecError, match="trainer_unroll_layers=true, or trainer_shared_prompts=false"):
        compose_spec([*base, "hardware.trainer_unroll_layers=false"])
    assert compose_spec([*base, "train.micro_batch_size=8"]).hardware.trainer_shared_prompts  # one micro-batch
