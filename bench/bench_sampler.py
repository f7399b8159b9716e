"""Sampler throughput on the tiny model (after compile): tokens/s, with and without in-flight weight swaps.

Swap rows set new weights at EVERY chunk boundary (the worst case; an RL run swaps once per trainer step):
"recompute" rebuilds the in-flight KV cache each time (one prefill pass), "keep" continues on the old cache.

    .venv/bin/python bench/bench_sampler.py                      # batch 32 and 64, 100 new tokens
    .venv/bin/python bench/bench_sampler.py --batch 32 --new-tokens 64 --levanter-engine

Rows = prompts x n generations. EOS is not a stop here (a random model emits it early and the rows would end at
different times); every row decodes --new-tokens tokens, so tokens/s is the raw decode rate. `--levanter-engine`
also times Levanter's own InferenceEngine on the same model and batch (float32 KV cache) for comparison.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from marin_rl.config.spec import ModelConfig, SamplerConfig
from marin_rl.inference.sampler import Sampler
from marin_rl.models.policy import build_policy
from marin_rl.models.tokenizer import build_char_tokenizer

PROMPTS = ["2+2=", "Hello there", "12*3=", "abc", "What is 7-5?", "x", "The answer is", "9/3"]


def no_eos_tokenizer():
    """The char tokenizer without an EOS id, so every row decodes the full budget (a steady-state measurement)."""
    tok = build_char_tokenizer()
    tok.eos_token = None
    return tok


def bench_ours(
    model, tok, batch: int, new_tokens: int, chunk: int, repeats: int, swap_every_chunk: bool, kv_on_swap: str
) -> float:
    cfg = SamplerConfig(name="levanter", temperature=1.0, max_new_tokens=new_tokens, decode_chunk=chunk)
    sampler = Sampler(model, tok, cfg, model.config.seq_len, max_batch=batch, kv_on_swap=kv_on_swap)
    n = batch // len(PROMPTS)
    prompts = [tok(p)["input_ids"] for p in PROMPTS]
    other = jax.tree.map(lambda x: x * 1.01, model)
    version = {"v": 0}

    def on_chunk(_):
        if swap_every_chunk:
            version["v"] += 1
            sampler.set_weights(other if version["v"] % 2 else model, version["v"])

    sampler.generate(prompts, n, on_chunk=on_chunk)  # compile (prefill, decode chunk, refill lengths)
    compiled = list(sampler.compile_events)
    rates = []
    for _ in range(repeats):
        sampler.generate(prompts, n, on_chunk=on_chunk)
        rates.append(sampler.last_stats["tokens_per_s"])
    stats = sampler.last_stats
    label = f"ours, swap/chunk ({kv_on_swap})" if swap_every_chunk else "ours"
    print(
        f"{label:<30} batch={batch:3d} new={new_tokens:3d} chunk={chunk:2d}: {max(rates):9.0f} tokens/s "
        f"(best of {repeats}; {stats['tokens']} tokens in {stats['seconds']:.3f}s, swaps={stats['swaps']}, "
        f"compiles: {len(compiled)})"
    )
    return max(rates)


def bench_levanter_engine(model, tok, batch: int, new_tokens: int, repeats: int) -> float:
    from levanter.inference.engine import InferenceEngine, InferenceEngineConfig, Request
    from levanter.inference.jit_scheduler import SeqDecodingParams

    max_prompt = max(len(tok(p)["input_ids"]) for p in PROMPTS)
    config = InferenceEngineConfig(
        max_seq_len=model.config.seq_len,
        max_seqs=batch,
        max_pages=batch * 2,
        page_size=64,
        max_queued_tokens=max(batch, 64),
        max_seqs_in_prefill=batch,
        max_prefill_size=batch * max_prompt,
        max_rounds=new_tokens,
        compute_dtype=jnp.float32,
        enable_logprobs=True,
    )
    engine = InferenceEngine.from_model_with_config(model=model, tokenizer=None, config=config)
    n = batch // len(PROMPTS)

    def run(seed: int) -> tuple[int, float]:
        requests = [
            Request(
                prompt_tokens=tok(p)["input_ids"],
                request_id=seed * 100 + i,
                decode_params=SeqDecodingParams(
                    max_num_tokens=jnp.asarray(len(tok(p)["input_ids"]) + new_tokens, jnp.int32),
                    stop_tokens=None,
                    temperature=jnp.asarray(1.0, jnp.float32),
                    key=jax.random.PRNGKey(seed * 100 + i),
                ),
                n_generations=n,
                enable_logprobs=True,
            )
            for i, p in enumerate(PROMPTS)
        ]
        t = time.perf_counter()
        result = engine.generate(requests)
        return result.total_generated, time.perf_counter() - t

    run(0)  # compile
    rates = []
    for r in range(repeats):
        tokens, seconds = run(r + 1)
        rates.append(tokens / seconds)
    print(
        f"{'levanter InferenceEngine':<30} batch={batch:3d} new={new_tokens:3d}: {max(rates):9.0f} tokens/s"
    )
    return max(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 64], help="rows per batch (multiple of 8)")
    ap.add_argument("--new-tokens", type=int, default=100, help="new tokens per row")
    ap.add_argument("--chunk", type=int, default=SamplerConfig.model_fields["decode_chunk"].default,
                    help="decode steps per jitted chunk (sampler.decode_chunk; default: the config's, %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levanter-engine", action="store_true", help="also time Levanter's InferenceEngine")
    args = ap.parse_args()

    model, _, _ = build_policy(ModelConfig(name="tiny", kind="tiny", max_seq_len=128), jax.random.PRNGKey(0))
    tok = no_eos_tokenizer()
    n_params = sum(x.size for x in jax.tree.leaves(model))
    print(
        f"tiny Llama: {n_params} params, vocab {model.Vocab.size}, max_seq_len 128, float32, {jax.devices()[0]}"
    )
    for batch in args.batch:
        for swap, kv in ((False, "recompute"), (True, "recompute"), (True, "keep")):
            bench_ours(model, tok, batch, args.new_tokens, args.chunk, args.repeats, swap, kv)
        if args.levanter_engine:
            bench_levanter_engine(model, tok, batch, args.new_tokens, args.repeats)


if __name__ == "__main__":
    main()
