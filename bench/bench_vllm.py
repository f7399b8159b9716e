"""The Levanter sampler vs a vLLM engine (hardware.inference_backend=vllm) on the same weights, one sitting.

    .venv/bin/python bench/bench_vllm.py                 # ~0.5M and ~10M parameters, batch 32 and 128, 128 new tokens
    .venv/bin/python bench/bench_vllm.py --sizes small --batches 32

Needs .venv-vllm (`make vllm`). Both samplers start from the same random model (the vLLM side serves its HF export,
the same mapping as `python -m marin_rl.training.export`). EOS is not a stop (a random model emits it early), so every
row decodes the full budget. Each figure is the best of --repeats after a warm-up call; the two sides alternate.
Weight update: seconds from set_weights to the engine holding the new weights (Levanter: the arrays are swapped in
at the next chunk; vLLM: HF names, pipe transfer and vLLM's in-place reload), measured over --repeats updates.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import jax

from marin_rl.config.spec import ModelConfig, SamplerConfig, VllmConfig
from marin_rl.inference.sampler import Sampler
from marin_rl.inference.vllm_sampler import VllmSampler
from marin_rl.models.policy import build_policy, count_params
from marin_rl.models.tokenizer import build_char_tokenizer

PROMPTS = ["2+2=", "Hello there", "12*3=", "abc", "What is 7-5?", "x", "The answer is", "9/3"]
# head size 64 for both: vLLM's CPU attention serves 32, 64, 80, ... (not the default tiny model's 16)
SIZES = {
    "small": dict(hidden_dim=128, intermediate_dim=512, num_layers=2, num_heads=2, num_kv_heads=2),  # ~0.5M
    "medium": dict(hidden_dim=512, intermediate_dim=1536, num_layers=3, num_heads=8, num_kv_heads=8),  # ~10M
}


def no_eos_tokenizer():
    tok = build_char_tokenizer()
    tok.eos_token = None
    return tok


def best_rate(sampler, prompts, n: int, repeats: int) -> float:
    sampler.generate(prompts, n)  # warm-up: compiles (Levanter) / first-step allocations (vLLM)
    rates = []
    for _ in range(repeats):
        sampler.generate(prompts, n)
        rates.append(sampler.last_stats["tokens_per_s"])
    return max(rates)


def update_seconds(sampler, models, repeats: int) -> float:
    """Mean seconds from set_weights to the new weights being live (a 1-token generation applies them)."""
    prompts = [[1]]
    sampler.generate(prompts, 1, max_new_tokens=1)  # compile the 1-row shapes outside the timing
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        sampler.set_weights(models[i % 2], 100 + i)
        sampler.generate(prompts, 1, max_new_tokens=1)
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tok = no_eos_tokenizer()
    seq_len = 32 + args.new_tokens
    rows = []
    for size in args.sizes:
        cfg = ModelConfig(name=size, kind="tiny", max_seq_len=seq_len, **SIZES[size])
        model = build_policy(cfg, jax.random.PRNGKey(0))[0]
        other = jax.tree.map(lambda x: x * 1.01 if hasattr(x, "dtype") and x.dtype.kind == "f" else x, model)
        params = count_params(model)
        scfg = SamplerConfig(name="bench", max_new_tokens=args.new_tokens, decode_chunk=8)
        prompts = [tok(p)["input_ids"] for p in PROMPTS]
        with tempfile.TemporaryDirectory() as work:
            ours = Sampler(model, tok, scfg, seq_len, max_batch=max(args.batches))
            engine = VllmSampler(model, tok, scfg, seq_len, VllmConfig(), work)
            try:
                for batch in args.batches:
                    n = batch // len(PROMPTS)
                    lev = best_rate(ours, prompts, n, args.repeats)
                    vll = best_rate(engine, prompts, n, args.repeats)
                    rows.append((f"{params / 1e6:.2f}M", batch, lev, vll))
                    print(f"{size} {params / 1e6:.2f}M batch {batch}: levanter {lev:,.0f} tok/s, vLLM {vll:,.0f} "
                          f"tok/s, ratio {lev / vll:.2f}", flush=True)
                lev_up = update_seconds(ours, [other, model], args.repeats)
                vll_up = update_seconds(engine, [other, model], args.repeats)
                print(f"{size} weight update: levanter {lev_up:.3f}s, vLLM {vll_up:.3f}s "
                      f"(engine-side reload {sum(engine.load_seconds) / len(engine.load_seconds):.3f}s)", flush=True)
                rows.append((f"{params / 1e6:.2f}M", "update s", lev_up, vll_up))
            finally:
                engine.close()
    print("\n| params | batch | Levanter sampler | vLLM-CPU | Levanter / vLLM |\n|---|---|---|---|---|")
    for params, batch, lev, vll in rows:
        unit = "s" if batch == "update s" else "tok/s"
        print(f"| {params} | {batch} | {lev:,.3f} {unit} | {vll:,.3f} {unit} | {lev / vll:.2f} |"
              if unit == "s" else f"| {params} | {batch} | {lev:,.0f} {unit} | {vll:,.0f} {unit} | {lev / vll:.2f} |")


if __name__ == "__main__":
    main()
