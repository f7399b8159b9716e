"""Trainer throughput on the tiny model (after compile): tokens/s of full RL train steps (forward, backward, AdamW).

    .venv/bin/python bench/bench_trainer.py                         # conf/model/tiny.yaml, batch 64 x seq 128
    .venv/bin/python bench/bench_trainer.py --batch 64 --seq 64 --micro-batch 16 --steps 10 --vocab-chunk 32

Batches are real char-tokenizer rows (prompt + response, right-padded) with the response half masked in, so the
numbers count every position the model processes ("tokens/s") and the response tokens the loss sees ("loss
tokens/s"). The first step (compile) is reported separately; the rate is the median over --steps later steps.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from marin_rl.config.spec import HardwareConfig, ModelConfig, OptimizerConfig, TrainConfig
from marin_rl.models.policy import build_policy, count_params
from marin_rl.objectives import LossConfig
from marin_rl.training.trainer import TrainBatch, Trainer

CONF = Path(__file__).resolve().parents[1] / "conf"


def load_yaml(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


def make_batch(tokenizer, batch: int, seq: int, seed: int) -> TrainBatch:
    rng = np.random.default_rng(seed)
    tokens = np.full((batch, seq), tokenizer.pad_token_id, np.int32)
    mask = np.zeros((batch, seq), np.float32)
    for i in range(batch):
        a, b = rng.integers(0, 1000, 2)
        prompt = tokenizer(f"Q: {a}+{b}\nA: ").input_ids
        response = tokenizer(str(a + b) + " " * seq, add_special_tokens=False).input_ids
        row = (prompt + response)[:seq]
        tokens[i, : len(row)] = row
        mask[i, len(prompt) : len(row)] = 1.0
    return TrainBatch(
        jnp.asarray(tokens),
        jnp.asarray(mask),
        jnp.asarray(rng.normal(size=batch).astype(np.float32)),
        jnp.full((batch, seq), -np.log(len(tokenizer)), jnp.float32),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="conf/model/NAME.yaml (kind=tiny only)")
    parser.add_argument("--loss", default="dapo_global", help="conf/loss/NAME.yaml")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--vocab-chunk", type=int, default=None)
    parser.add_argument("--steps", type=int, default=10, help="timed steps after the compile step")
    args = parser.parse_args()

    model_cfg = ModelConfig(**load_yaml("model", args.model))
    if model_cfg.kind != "tiny":
        raise SystemExit(f"--model {args.model}: this benchmark builds kind=tiny models only")
    if args.seq > model_cfg.max_seq_len:
        model_cfg = model_cfg.model_copy(update={"max_seq_len": args.seq})
    loss_cfg = LossConfig(**load_yaml("loss", args.loss))
    opt_cfg = OptimizerConfig(**load_yaml("optimizer", "adamw"))
    hardware = HardwareConfig(**load_yaml("hardware", "cpu"))
    train = TrainConfig(batch_size=args.batch, micro_batch_size=args.micro_batch, steps=args.steps + 1)

    model, tokenizer, _ = build_policy(model_cfg, jax.random.PRNGKey(0))
    trainer = Trainer(
        model_cfg, opt_cfg, loss_cfg, train, hardware, sampler_temperature=1.0, vocab_chunk=args.vocab_chunk
    )
    state = trainer.init_state(model)
    batches = [make_batch(tokenizer, args.batch, args.seq, seed) for seed in range(args.steps + 1)]

    t0 = time.perf_counter()
    state, _ = trainer.train_step(state, batches[0])
    compile_s = time.perf_counter() - t0
    times = []
    for batch in batches[1:]:
        t0 = time.perf_counter()
        state, metrics = trainer.train_step(state, batch)  # returns python floats: the step has finished
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    loss_tokens = float(np.mean([float(b.loss_mask.sum()) for b in batches[1:]]))
    print(
        f"model {args.model} ({count_params(model):,} params, vocab {len(tokenizer)}), loss {args.loss}, "
        f"batch {args.batch} x seq {args.seq}, micro-batch {args.micro_batch or args.batch}, "
        f"vocab chunk {args.vocab_chunk}, {jax.devices()[0].platform}"
    )
    print(f"compile + first step: {compile_s:.1f} s; recompiles after: {trainer.traces - 1}")
    print(
        f"step: median {step_s * 1e3:.1f} ms over {len(times)} steps (min {min(times) * 1e3:.1f}, "
        f"max {max(times) * 1e3:.1f})"
    )
    print(
        f"tokens/s: {args.batch * args.seq / step_s:,.0f} (all positions), "
        f"{loss_tokens / step_s:,.0f} (loss tokens)"
    )


if __name__ == "__main__":
    main()
