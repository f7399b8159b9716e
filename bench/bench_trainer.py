"""Trainer throughput and model-FLOPs utilisation (MFU) of full RL train steps (forward, backward, AdamW).

    .venv/bin/python bench/bench_trainer.py                     # conf/model/tiny.yaml, batch 64 x seq 128 rows
    .venv/bin/python bench/bench_trainer.py --preset grpo-4m    # 4.2M-param Llama, GRPO batch 4 prompts x 8
    .venv/bin/python bench/bench_trainer.py --preset grpo-4m --unroll-layers off   # Levanter's layer scan
    .venv/bin/python bench/bench_trainer.py --preset grpo-4m --shared-prompts off   # one row per response

--preset grpo-4m: conf/model/tiny.yaml with hidden 256, MLP 1024, 4 layers (4.2M parameters, ~100-char vocab),
conf/loss/grpo.yaml (KL to a reference model), 4 prompts x 8 generations of real RolloutGroups whose answers are
~30 of at most 32 new tokens; they go through the trainer actor's own path (prepare_batch, step_batch,
Trainer.train_step), laid out as shared-prompt rows with hardware.trainer_shared_prompts (conf/hardware/cpu.yaml's value
unless --shared-prompts). Without a preset, batches are char-tokenizer rows of --seq.

Printed: step seconds (median over --steps steps after the compile step), tokens per step (real = prompt + response
tokens, padded = rows x bucket length of the rows the forward pass runs over), model FLOPs per step = 6 x params x padded tokens (the policy's forward and
backward: what the matmuls run on), achieved GFLOP/s, the machine's JAX f32 matmul peak measured here (best of square
matmuls 512-2048) and MFU = achieved / peak. With a KL term (loss.kl.coef > 0) the step also runs the reference
model's forward, 2 x params x padded tokens more: a second MFU line counts it (8 x params x padded tokens), so both
readings are on the page. `--kl-coef 0` drops the reference (the peers' RL setting: GRPO without KL).
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
from marin_rl.rollouts import Rollout, RolloutGroup
from marin_rl.runtime.allocator import reexec_with_allocator
from marin_rl.training.data_processing import prepare_batch
from marin_rl.training.trainer import TrainBatch, Trainer, step_batch

CONF = Path(__file__).resolve().parents[1] / "conf"
PRESETS = {
    "grpo-0.15m": {
        "model": {},
        "loss": "grpo",
        "prompts": 4,
        "generations": 8,
        "max_new_tokens": 32,
        "answer_tokens": 30,
    },
    "grpo-4m": {
        "model": {"hidden_dim": 256, "intermediate_dim": 1024, "num_layers": 4},
        "loss": "grpo",
        "prompts": 4,
        "generations": 8,
        "max_new_tokens": 32,
        "answer_tokens": 30,
    },
}
MATMUL_SIZES = (512, 1024, 2048)


def load_yaml(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


def matmul_peak_gflops(sizes=MATMUL_SIZES, repeats: int = 5) -> float:
    """Best f32 GFLOP/s of jitted square matmuls (2 n^3 FLOPs each) on this JAX backend."""
    best = 0.0
    for n in sizes:
        a = jnp.asarray(np.random.default_rng(n).standard_normal((n, n), np.float32))
        f = jax.jit(lambda x, y: x @ y)
        f(a, a).block_until_ready()
        for _ in range(repeats):
            t0 = time.perf_counter()
            f(a, a).block_until_ready()
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


def make_rows_batch(tokenizer, batch: int, seq: int, seed: int) -> tuple[TrainBatch, int, int]:
    """(char-tokenizer rows 'Q: a+b / A: ' + answer padded with spaces to seq, real tokens, padded tokens)."""
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
    train_batch = TrainBatch(
        jnp.asarray(tokens),
        jnp.asarray(mask),
        jnp.asarray(rng.normal(size=batch).astype(np.float32)),
        jnp.full((batch, seq), -np.log(len(tokenizer)), jnp.float32),
    )
    return train_batch, batch * seq, batch * seq


def make_groups(tokenizer, preset: dict, seed: int) -> list[RolloutGroup]:
    """GRPO-shaped groups: per prompt, `generations` answers of ~answer_tokens tokens with 0/1 rewards."""
    rng = np.random.default_rng(seed)
    vocab = len(tokenizer)
    groups = []
    for p in range(preset["prompts"]):
        a, b = rng.integers(0, 1000, 2)
        prompt = np.asarray(tokenizer(f"Q: {a}+{b}\nA: ").input_ids, np.int32)
        rollouts = []
        for _ in range(preset["generations"]):
            n = int(np.clip(preset["answer_tokens"] + rng.integers(-4, 3), 1, preset["max_new_tokens"]))
            reward = float(rng.integers(0, 2))
            rollouts.append(Rollout(
                problem_id=f"bench-{p}", env="bench", prompt_tokens=prompt,
                response_tokens=rng.integers(3, vocab, n).astype(np.int32),
                sampler_logp=np.full(n, -np.log(vocab), np.float32), versions=np.zeros(n, np.int32),
                reward=reward, correct=bool(reward), format_ok=True, truncated=n == preset["max_new_tokens"],
            ))
        groups.append(RolloutGroup(tuple(rollouts)))
    return groups


def make_groups_batch(
    tokenizer, preset, loss_cfg, train: TrainConfig, max_seq_len, shared_prompts: bool, seed: int
) -> tuple[TrainBatch, int, int]:
    """The trainer actor's path (runtime/trainer_actor.py `_optimizer_step`): (padded batch, real tokens, padded
    tokens through the layers: the step's train/padded_tokens)."""
    prepared = prepare_batch(
        make_groups(tokenizer, preset, seed), loss_cfg, preset["max_new_tokens"], preset["prompts"]
    )
    rollouts = prepared.rollouts
    batch, metrics = step_batch(
        rollouts, prepared.advantages_B, train, max_seq_len, tokenizer.pad_token_id, loss_cfg.overlong.filter_truncated,
        shared_prompts, preset["generations"],
    )
    real = sum(len(r.prompt_tokens) + len(r.response_tokens) for r in rollouts)
    return batch, real, metrics["train/padded_tokens"]


def layout(batch: TrainBatch) -> str:
    if batch.shared is None:
        return "off"
    (G, P), (_, N, T) = batch.shared.prompts_GP.shape, batch.shared.responses_GNT.shape
    return f"on ({G} prompts x {P} + {G} x {N} responses x {T} tokens)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="model shape + GRPO batch")
    parser.add_argument("--model", default="tiny", help="conf/model/NAME.yaml (kind=tiny only)")
    parser.add_argument("--loss", default=None, help="conf/loss/NAME.yaml (default: dapo_global, or the preset's)")
    parser.add_argument("--batch", type=int, default=64, help="rows per step (no preset)")
    parser.add_argument("--seq", type=int, default=128, help="row length (no preset)")
    parser.add_argument(
        "--kl-coef", type=float, default=None, help="override loss.kl.coef (0 = no reference model forward)"
    )
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--vocab-chunk", type=int, default=None)
    parser.add_argument(
        "--unroll-layers", choices=["config", "on", "off"], default="config",
        help="hardware.trainer_unroll_layers: config = conf/hardware/cpu.yaml's value",
    )
    parser.add_argument(
        "--malloc-hugepages", choices=["config", "on", "off"], default="config",
        help="hardware.malloc_hugepages (this process re-executes itself with or without the glibc tunable, as "
        "the trainer actor starts): config = conf/hardware/cpu.yaml's value",
    )
    parser.add_argument(
        "--shared-prompts", choices=["config", "on", "off"], default="config",
        help="hardware.trainer_shared_prompts (with --preset; off = one row per response): config = "
        "conf/hardware/cpu.yaml's value",
    )
    parser.add_argument(
        "--length-buckets-per-octave", type=int, choices=[1, 2, 4, 8], default=2,
        help="train.length_buckets_per_octave (conf/config.yaml's default: 2)",
    )
    parser.add_argument("--steps", type=int, default=10, help="timed steps after the compile step")
    args = parser.parse_args()

    preset = PRESETS[args.preset] if args.preset else None
    model_cfg = ModelConfig(**{**load_yaml("model", args.model), **(preset["model"] if preset else {})})
    if model_cfg.kind != "tiny":
        raise SystemExit(f"--model {args.model}: this benchmark builds kind=tiny models only")
    if not preset and args.seq > model_cfg.max_seq_len:
        model_cfg = model_cfg.model_copy(update={"max_seq_len": args.seq})
    loss_name = args.loss or (preset["loss"] if preset else "dapo_global")
    loss_cfg = LossConfig(**load_yaml("loss", loss_name))
    if args.kl_coef is not None:
        loss_cfg = loss_cfg.model_copy(update={"kl": loss_cfg.kl.model_copy(update={"coef": args.kl_coef})})
    opt_cfg = OptimizerConfig(**load_yaml("optimizer", "adamw"))
    hardware = HardwareConfig(**load_yaml("hardware", "cpu"))
    if args.unroll_layers != "config":
        hardware = hardware.model_copy(update={"trainer_unroll_layers": args.unroll_layers == "on"})
    if args.malloc_hugepages != "config":
        hardware = hardware.model_copy(update={"malloc_hugepages": args.malloc_hugepages == "on"})
    # shared-prompt rows need GRPO groups (a preset), one pass per step and the unrolled layers
    shared_ok = bool(preset) and not args.micro_batch and hardware.trainer_unroll_layers
    if args.shared_prompts == "on" and not shared_ok:
        raise SystemExit("--shared-prompts on needs --preset, no --micro-batch and unrolled layers")
    if args.shared_prompts != "config" or not shared_ok:
        hardware = hardware.model_copy(update={"trainer_shared_prompts": args.shared_prompts == "on"})
    reexec_with_allocator(hardware.malloc_hugepages)
    batch_size = preset["prompts"] * preset["generations"] if preset else args.batch
    train = TrainConfig(
        batch_size=batch_size, micro_batch_size=args.micro_batch, steps=args.steps + 1,
        length_buckets_per_octave=args.length_buckets_per_octave,
    )

    model, tokenizer, _ = build_policy(model_cfg, jax.random.PRNGKey(0))
    trainer = Trainer(
        model_cfg, opt_cfg, loss_cfg, train, hardware, sampler_temperature=1.0, vocab_chunk=args.vocab_chunk,
        reference_model=model if loss_cfg.kl.coef > 0 else None,
    )
    state = trainer.init_state(model)
    if preset:
        made = [
            make_groups_batch(
                tokenizer, preset, loss_cfg, train, model_cfg.max_seq_len, hardware.trainer_shared_prompts, seed
            )
            for seed in range(args.steps + 1)
        ]
    else:
        made = [make_rows_batch(tokenizer, args.batch, args.seq, seed) for seed in range(args.steps + 1)]
    batches = [b for b, _, _ in made]

    t0 = time.perf_counter()
    state, _ = trainer.train_step(state, batches[0])
    compile_s = time.perf_counter() - t0
    times = []
    for batch in batches[1:]:
        t0 = time.perf_counter()
        state, metrics = trainer.train_step(state, batch)  # returns python floats: the step has finished
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    params = count_params(model)
    padded_tokens = float(np.mean([padded for _, _, padded in made[1:]]))
    real_tokens = float(np.mean([real for _, real, _ in made[1:]]))
    loss_tokens = float(np.mean([float(b.loss_mask.sum()) for b in batches[1:]]))
    model_gflop = 6 * params * padded_tokens / 1e9
    achieved = model_gflop / step_s
    peak = matmul_peak_gflops()
    print(
        f"model {args.model}{' preset ' + args.preset if preset else ''} ({params:,} params, vocab "
        f"{len(tokenizer)}), loss {loss_name} (kl coef {loss_cfg.kl.coef}), "
        f"batch {batch_size} x seq {batches[1].tokens.shape[1]}, shared prompts {layout(batches[1])}, "
        f"micro-batch {args.micro_batch or batch_size}, vocab chunk {args.vocab_chunk}, "
        f"unroll layers {trainer.unroll_layers}, malloc huge pages {hardware.malloc_hugepages}, "
        f"{jax.devices()[0].platform}"
    )
    print(f"compile + first step: {compile_s:.1f} s; recompiles after: {trainer.traces - 1}")
    print(
        f"step: median {step_s:.3f} s over {len(times)} steps (min {min(times):.3f}, max {max(times):.3f})"
    )
    print(
        f"tokens/step: {padded_tokens:,.0f} padded, {real_tokens:,.0f} real (prompt + response), "
        f"{loss_tokens:,.0f} loss"
    )
    print(f"model FLOPs/step: 6 x params x padded tokens = {model_gflop:.1f} GFLOP; achieved {achieved:.1f} GFLOP/s")
    print(f"JAX f32 matmul peak (square {MATMUL_SIZES}): {peak:.1f} GFLOP/s; MFU {achieved / peak:.1%}")
    if loss_cfg.kl.coef > 0:
        with_ref = 8 * params * padded_tokens / 1e9
        print(
            f"with the KL reference forward (8 x params x padded tokens = {with_ref:.1f} GFLOP): "
            f"{with_ref / step_s:.1f} GFLOP/s, MFU {with_ref / step_s / peak:.1%}"
        )


if __name__ == "__main__":
    main()
