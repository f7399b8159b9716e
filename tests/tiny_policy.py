"""Shared tiny model + trainer for the model/trainer/checkpoint/export tests, built once per pytest process.

Jit compilation dominates these tests on a CPU, so the trainer (and its compiled step) is cached here and reused by
every test file instead of being rebuilt per module.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np

from marin_rl.config.spec import HardwareConfig, ModelConfig, OptimizerConfig, TrainConfig
from marin_rl.models.policy import build_policy
from marin_rl.objectives import LossConfig
from marin_rl.rollouts import Rollout
from marin_rl.runtime.compile_cache import PROGRAM_EVENT
from marin_rl.training.trainer import TrainBatch, Trainer, step_batch

MODEL = ModelConfig(
    name="tiny-test", kind="tiny", max_seq_len=64, hidden_dim=32, intermediate_dim=64, num_layers=2
)
OPTIMIZER = OptimizerConfig(lr=3e-3, schedule="cosine", warmup_steps=2, max_grad_norm=1.0, weight_decay=0.01)
HARDWARE = HardwareConfig(name="cpu", accelerator="cpu")
BATCH, SEQ = 8, 24
TEMPERATURE = 0.9


@contextlib.contextmanager
def count_compiles():
    """Yields a list that collects one entry per XLA backend compile inside the block (the event also marks a load
    from the persistent compile cache, which the test process leaves off)."""
    compiles: list[float] = []

    def listener(event: str, duration: float, **_) -> None:
        if event == PROGRAM_EVENT:
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@functools.cache
def tiny_model():
    """(model, tokenizer, lev_config) of MODEL with a fixed key."""
    return build_policy(MODEL, jax.random.PRNGKey(0))


@functools.cache
def tiny_trainer(micro_batch_size: int | None = None, ratio_baseline: str = "sampler") -> Trainer:
    loss = LossConfig(name="test", ratio_baseline=ratio_baseline)
    train = TrainConfig(batch_size=BATCH, micro_batch_size=micro_batch_size, steps=10)
    return Trainer(MODEL, OPTIMIZER, loss, train, HARDWARE, TEMPERATURE)


def arithmetic_rows(tokenizer, n: int, seed: int) -> list[tuple[str, str, bool]]:
    """n (prompt, response, correct) triples: "a+b=" answered right for even rows, off by one for odd rows."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(0, 50, 2))
        correct = i % 2 == 0
        rows.append((f"{a}+{b}=", str(a + b if correct else a + b + 1), correct))
    return rows


def arithmetic_batch(tokenizer, seed: int, sampler_logp=None) -> TrainBatch:
    """A real right-padded TrainBatch from the char tokenizer: prompt + response + <eos>, mask on the response,
    advantage +1 for correct answers and -1 otherwise; sampler_logp defaults to a uniform sampler's -log V."""
    tokens = np.full((BATCH, SEQ), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((BATCH, SEQ), np.float32)
    advantages = np.zeros(BATCH, np.float32)
    for i, (prompt, response, correct) in enumerate(arithmetic_rows(tokenizer, BATCH, seed)):
        p = tokenizer(prompt).input_ids
        r = tokenizer(response, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        tokens[i, : len(p) + len(r)] = p + r
        mask[i, len(p) : len(p) + len(r)] = 1.0
        advantages[i] = 1.0 if correct else -1.0
    if sampler_logp is None:
        sampler_logp = np.full((BATCH, SEQ), -np.log(len(tokenizer)), np.float32)
    return TrainBatch(
        jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(advantages), jnp.asarray(sampler_logp)
    )


TRAIN = TrainConfig(batch_size=BATCH, steps=10)


def grpo_rollouts(seed: int, groups: int = 2, per_group: int = 3) -> list[Rollout]:
    """`groups` prompts (5-9 tokens) with `per_group` responses of 1-12 tokens each, rewards alternating."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        prompt = rng.integers(3, 90, rng.integers(5, 10)).astype(np.int32)
        for k in range(per_group):
            n = int(rng.integers(1, 13))
            out.append(Rollout(
                problem_id=f"p{g}", env="test", prompt_tokens=prompt,
                response_tokens=rng.integers(3, 90, n).astype(np.int32),
                sampler_logp=np.full(n, -np.log(100.0), np.float32), versions=np.zeros(n, np.int32),
                reward=float(k % 2), correct=bool(k % 2), format_ok=True, truncated=False,
            ))
    return out


def shared_prompt_batches(seed: int, groups: int = 2, per_group: int = 3, edit=None):
    """(rollouts, their step arrays as one row per response, the same with the shared-prompt layout, its metrics);
    `edit` may rewrite the rollouts first."""
    rs = grpo_rollouts(seed, groups, per_group)
    rs = edit(rs) if edit else rs
    advantages = np.where(np.arange(len(rs)) % 2, 1.0, -1.0).astype(np.float32)
    plain, _ = step_batch(rs, advantages, TRAIN, MODEL.max_seq_len, 0, False)
    shared, metrics = step_batch(rs, advantages, TRAIN, MODEL.max_seq_len, 0, False, True, per_group)
    return rs, plain, shared, metrics
