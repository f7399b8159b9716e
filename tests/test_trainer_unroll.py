"""hardware.trainer_unroll_layers: the trainer's Llama layers as straight-line code give the same log-probs,
gradients and loss metrics as Levanter's layer scan, and the traced program really has no layer scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from tiny_policy import (
    BATCH,
    HARDWARE,
    MODEL,
    OPTIMIZER,
    TEMPERATURE,
    arithmetic_batch,
    tiny_model,
    tiny_trainer,
)

from marin_rl.config.spec import TrainConfig
from marin_rl.objectives import LossConfig
from marin_rl.training.logprobs import token_stats, unrollable
from marin_rl.training.trainer import Trainer


def unrolled_trainer() -> Trainer:
    hardware = HARDWARE.model_copy(update={"trainer_unroll_layers": True})
    train = TrainConfig(batch_size=BATCH, steps=10)
    return Trainer(MODEL, OPTIMIZER, LossConfig(name="test"), train, hardware, TEMPERATURE)


def has_scan(fn, *args) -> bool:
    return "scan[" in str(jax.make_jaxpr(fn)(*args))


def test_unrolled_layers_match_the_layer_scan():
    model, tokenizer, _ = tiny_model()
    assert unrollable(model)
    batch = arithmetic_batch(tokenizer, seed=3)
    scan_grads, scan_metrics = tiny_trainer(None).grads(model, batch)
    unrolled = unrolled_trainer()
    grads, metrics = unrolled.grads(model, batch)
    for a, b in zip(jax.tree.leaves(scan_grads), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6 * float(jnp.abs(a).max() + 1e-12))
    for key in scan_metrics:
        np.testing.assert_allclose(metrics[key], scan_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(
        unrolled.logprobs(model, batch.tokens), tiny_trainer(None).logprobs(model, batch.tokens), atol=1e-5
    )


def test_unroll_removes_the_layer_scan_from_the_traced_forward():
    model, tokenizer, _ = tiny_model()
    tokens = arithmetic_batch(tokenizer, seed=0).tokens
    assert has_scan(lambda m, t: token_stats(m, t, unroll_layers=False).logp, model, tokens)
    assert not has_scan(lambda m, t: token_stats(m, t, unroll_layers=True).logp, model, tokens)
