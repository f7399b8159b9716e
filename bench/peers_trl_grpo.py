"""TRL GRPOTrainer on an HF export folder: RL steps/s, sampled tokens/s and mean answer length as one JSON line.

    .venv-peers/bin/python bench/peers_trl_grpo.py --model DIR --problems P.jsonl --steps 12 --warmup 2 \
        --prompts-per-step 4 --generations 8 --max-new-tokens 32 --lr 7e-4 --out OUT

Runs in .venv-peers (torch CPU + transformers + trl) and imports nothing from marin_rl. --problems holds the task
(one {"prompt": str, "gold": str} per line; bench/peers.py writes them from marin-rl's mock reverse task), and the
reward is that task's grading: 1.0 when the stripped completion equals the gold answer, else 0.0. GRPO here is
TRL's loss_type="grpo" with beta=0 (no reference model), one gradient step per generation batch, constant lr,
sampling at temperature 1 with EOS as the stop, like the marin-rl side (loss=grpo, loss.kl.coef=0).
Timing: wall seconds between the end of step --warmup and the end of the last step (first steps pay warm-up).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


def exact_match_reward(completions: list[str], gold: list[str], **_) -> list[float]:
    """The mock tasks' grading: 1.0 when the stripped answer equals the gold string, else 0.0."""
    return [1.0 if c.strip() == g else 0.0 for c, g in zip(completions, gold, strict=True)]


class StepClock(TrainerCallback):
    """Wall clock at the end of every optimizer step, and the per-step logs TRL writes (completion lengths)."""

    def __init__(self) -> None:
        self.step_end_s: list[float] = []
        self.logs: list[dict] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.step_end_s.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs:
            self.logs.append(dict(logs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF export folder")
    ap.add_argument("--problems", required=True, help="JSONL with prompt and gold per line")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the timing (>= 1)")
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="scratch output folder for the trainer")
    args = ap.parse_args()
    if not 1 <= args.warmup < args.steps:
        raise SystemExit(f"need 1 <= --warmup ({args.warmup}) < --steps ({args.steps})")

    with open(args.problems) as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    dataset = Dataset.from_list([{"prompt": r["prompt"], "gold": r["gold"]} for r in rows])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=args.out,
        per_device_train_batch_size=args.prompts_per_step * args.generations,
        num_generations=args.generations,
        max_completion_length=args.max_new_tokens,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        loss_type="grpo",
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        disable_tqdm=True,
        gradient_checkpointing=False,  # marin-rl keeps activations too: equal work per step
    )
    clock = StepClock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact_match_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    timed = clock.step_end_s[args.warmup - 1 :]  # from the end of step --warmup to the end of the last
    seconds = timed[-1] - timed[0]
    steps = len(timed) - 1
    logs = clock.logs[args.warmup :]
    mean_len = sum(log["completions/mean_length"] for log in logs) / len(logs)
    rows_per_step = args.prompts_per_step * args.generations
    print(json.dumps({
        "side": "trl",
        "model": args.model,
        "params": sum(p.numel() for p in model.parameters()),
        "timed_steps": steps,
        "seconds": seconds,
        "steps_per_s": steps / seconds,
        "mean_answer_len": mean_len,
        "sampled_tokens_per_s": mean_len * rows_per_step * steps / seconds,
        "reward_mean": sum(log.get("reward", 0.0) for log in logs) / len(logs),
        "torch_threads": torch.get_num_threads(),
    }), flush=True)


if __name__ == "__main__":
    main()
