"""Supervised warm-start: cross-entropy on response tokens (+ EOS) of (prompt, response) pairs, AdamW.

Examples come from the environment's reference answers (`sft.source: env`) or from a synthetic JSONL written by
`mode=generate` (`sft.source: <path>`). Prompts are encoded exactly as the samplers encode them (<bos> + text for
plain prompts, the tokenizer's chat template for chat messages), rows are right-padded to one fixed length so the
step compiles once, and the loss is the mean negative log-likelihood over response tokens:

    L = - sum_{b,t} m[b,t] log p(x[b,t] | x[b,<t]) / sum_{b,t} m[b,t]
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from marin_rl.config.seeds import numpy_rng
from marin_rl.config.spec import OptimizerConfig, RunSpec
from marin_rl.inference.prompts import Prompt, encode_prompt, prompt_style
from marin_rl.training import mesh as meshes
from marin_rl.training.logprobs import response_logprobs
from marin_rl.training.trainer import TrainerState, make_optimizer, trainable

Example = tuple[Prompt, str]  # (prompt, response text)
SEQ_BUCKET = 32  # rows are padded to a multiple of this many tokens


def encode_examples(
    examples: Sequence[Example], tokenizer: Any, max_seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32[N, S], loss_mask f32[N, S]): prompt + response + <eos>, right-padded, mask on response + eos.

    S = the longest row rounded up to a multiple of SEQ_BUCKET (capped at max_seq_len); an over-long prompt is cut from the left (like the samplers do),
    an over-long response from the right.
    """
    if not examples:
        raise ValueError("SFT needs at least one (prompt, response) example")
    rows = []
    for i, (prompt, response) in enumerate(examples):
        p = encode_prompt(prompt, tokenizer)
        r = list(tokenizer(response, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
        if len(r) >= max_seq_len:
            r = r[: max_seq_len - 1]
        p = p[-(max_seq_len - len(r)) :]
        if not p:
            raise ValueError(f"SFT example {i}: the prompt encodes to no tokens")
        rows.append((p, r))
    longest = max(len(p) + len(r) for p, r in rows)
    seq_len = min(
        -(-longest // SEQ_BUCKET) * SEQ_BUCKET, max_seq_len
    )  # bucketed: fewer distinct compiled shapes
    tokens = np.full((len(rows), seq_len), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((len(rows), seq_len), np.float32)
    for i, (p, r) in enumerate(rows):
        tokens[i, : len(p) + len(r)] = p + r
        mask[i, len(p) : len(p) + len(r)] = 1.0
    return tokens, mask


def response_nll(model: Any, tokens: jax.Array, mask: jax.Array, vocab_chunk: int | None = None) -> jax.Array:
    """Mean negative log-likelihood of the masked (response) tokens, temperature 1."""
    logp = response_logprobs(model, tokens, 1.0, vocab_chunk)
    return -jnp.sum(jnp.where(mask > 0, logp, 0.0)) / jnp.maximum(mask.sum(), 1.0)


def sft_optimizer_config(lr: float) -> OptimizerConfig:
    """AdamW at a constant lr with the default betas and grad-norm clipping at 1.0."""
    return OptimizerConfig(lr=lr, schedule="constant", max_grad_norm=1.0)


@functools.cache
def _sft_optimizer(opt_cfg: OptimizerConfig) -> optax.GradientTransformation:
    # constant schedule: the step count does not matter, and one cached optimizer lets runs share a compiled step
    return make_optimizer(opt_cfg, total_steps=1)


@functools.cache
def _sft_step(opt_cfg: OptimizerConfig, vocab_chunk: int | None):
    """The jitted SFT step for one optimizer config (cached: repeated SFT runs of one shape compile once)."""
    optimizer = _sft_optimizer(opt_cfg)

    @eqx.filter_jit
    def step_fn(state: TrainerState, batch_tokens, batch_mask):
        params, static = eqx.partition(state.model, eqx.is_inexact_array)
        loss, grads = jax.value_and_grad(
            lambda p: response_nll(eqx.combine(p, static), batch_tokens, batch_mask, vocab_chunk)
        )(params)
        updates, opt_state = optimizer.update(grads, state.opt_state, params)
        model = eqx.combine(optax.apply_updates(params, updates), static)
        return TrainerState(model, opt_state, state.step + 1, state.key), loss

    return step_fn


def run_sft(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Example],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int = 0,
    max_seq_len: int | None = None,
    log_path: str | Path | None = None,
    vocab_chunk: int | None = None,
    print_every: int | None = None,
    return_state: bool = False,
    mesh: Mesh | None = None,
) -> tuple[Any, list[float]]:
    """Train `model` for `steps` AdamW steps on `examples`; returns (model, per-step losses).

    Batches are drawn without replacement within each pass over the data (seeded). Each step appends
    {"step", "sft/loss", "sft/tokens", "time/step_s"} to `log_path` (JSONL) when given and prints progress.
    With return_state=True the first element is a TrainerState (model, optimizer state, step, key) instead.
    `mesh`: the mesh the model is placed on, if any; the whole state is then placed on it before the first step.
    """
    if steps < 0 or batch_size < 1:
        raise ValueError(f"sft.steps={steps} must be >= 0 and sft.batch_size={batch_size} >= 1")
    max_seq_len = max_seq_len or model.config.seq_len
    tokens, mask = encode_examples(examples, tokenizer, max_seq_len)
    opt_cfg = sft_optimizer_config(lr)
    optimizer = _sft_optimizer(opt_cfg)
    state = TrainerState(
        model, optimizer.init(trainable(model)), jnp.zeros((), jnp.int32), jax.random.PRNGKey(seed)
    )
    if mesh is not None:
        # jit keys its programs on where the arguments live: with the new optimizer state, step and key left
        # unplaced next to a placed model, step 2 (on step 1's placed outputs) compiled the step a second time
        state = meshes.shard_params(state, mesh)
    step_fn = _sft_step(opt_cfg, vocab_chunk)

    rng = np.random.default_rng(seed)
    order: list[int] = []
    history: list[float] = []
    print_every = print_every or max(1, steps // 10)
    log_file = None if log_path is None else Path(log_path).open("a")
    t_start = time.monotonic()
    try:
        for step in range(1, steps + 1):
            while len(order) < batch_size:  # epochs of a fresh permutation, so every example is used
                order.extend(int(i) for i in rng.permutation(len(tokens)))
            idx, order = order[:batch_size], order[batch_size:]
            t0 = time.monotonic()
            state, loss = step_fn(state, jnp.asarray(tokens[idx]), jnp.asarray(mask[idx]))
            loss = float(loss)
            history.append(loss)
            row = {
                "step": step,
                "sft/loss": loss,
                "sft/tokens": float(mask[idx].sum()),
                "time/step_s": time.monotonic() - t0,
            }
            if log_file is not None:
                log_file.write(json.dumps(row) + "\n")
                log_file.flush()
            if step % print_every == 0 or step == steps:
                print(
                    f"sft step {step}/{steps}  loss {loss:.4f}  ({time.monotonic() - t_start:.1f}s)",
                    flush=True,
                )
    finally:
        if log_file is not None:
            log_file.close()
    return (state if return_state else state.model), history


def sft_examples(spec: RunSpec, env: Any, tokenizer: Any = None, n: int | None = None) -> list[Example]:
    """(prompt, response) pairs from `spec.sft.source`: "env" = the env's reference answers for n sampled problems
    (default steps x batch_size), else a synthetic JSONL path (`marin_rl.environments.synthetic.load_sft_jsonl`)."""
    source = spec.sft.source
    if source != "env":
        from marin_rl.environments.decontam import decontaminate_sft_rows
        from marin_rl.environments.synthetic import load_sft_jsonl

        rows = load_sft_jsonl(source)
        if spec.env.decontam.enabled:
            rows = decontaminate_sft_rows(rows, env, spec.env.decontam.ngram, source)
        return [(row["prompt"], row["response"]) for row in rows]
    style = prompt_style(spec.model.chat_template)
    n = n or max(sft_steps(spec), 1) * spec.sft.batch_size
    problems = env.sample(n, numpy_rng(spec.seed, "sft-examples"))
    examples = [
        (env.render(p, style), env.reference_response(p)) for p in problems if p.reference is not None
    ]
    if not examples:
        raise ValueError(
            f"sft.source=env: environment {spec.env.name!r} gave no problems with reference answers; "
            "point sft.source at a synthetic JSONL (mode=generate writes one)"
        )
    return examples


def sft_steps(spec: RunSpec) -> int:
    """SFT steps: train.steps in mode=sft (the run is only SFT), sft.steps for the warm-start before RL."""
    return spec.train.steps if spec.mode == "sft" else spec.sft.steps
