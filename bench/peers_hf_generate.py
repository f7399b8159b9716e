"""HF transformers `generate` on HF export folders: decode tokens/s as one JSON line per folder (peers venv).

    .venv-peers/bin/python bench/peers_hf_generate.py --prompts P.json --new-tokens 128 --repeats 3 DIR [DIR ...]

Runs in .venv-peers (torch CPU + transformers 5.x) and imports nothing from marin_rl: the side-by-side partner of
bench/peers_ours_sampler.py (same prompt token ids, same rows, same new tokens, temperature 1, no top-k/top-p).
EOS is not a stop (generation_config.eos_token_id = None), so every row decodes --new-tokens tokens; prompts are
left-padded with an attention mask, KV cache on. The rate is the best of --repeats after one warm-up call.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM


def left_padded(prompt_ids: list[list[int]], n: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of every prompt repeated n times, left-padded to the longest prompt."""
    rows = [ids for ids in prompt_ids for _ in range(n)]
    width = max(len(ids) for ids in rows)
    input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in rows], dtype=torch.long)
    return input_ids, mask


def decode_rate(folder: str, prompt_ids: list[list[int]], n: int, pad_id: int, new_tokens: int, repeats: int) -> dict:
    """Best-of-`repeats` new tokens/s of HF generate (sampling at T=1, no EOS stop) after one warm-up call."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = pad_id
    input_ids, mask = left_padded(prompt_ids, n, pad_id)
    kwargs = dict(
        attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, use_cache=True,
    )
    runs = []
    with torch.inference_mode():
        torch.manual_seed(0)
        model.generate(input_ids, **kwargs)  # warm-up
        for r in range(repeats):
            torch.manual_seed(r + 1)
            t = time.perf_counter()
            out = model.generate(input_ids, **kwargs)
            seconds = time.perf_counter() - t
            tokens = int(out[:, input_ids.shape[1]:].numel())
            runs.append({"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds})
    best = max(runs, key=lambda s: s["tokens_per_s"])
    return {
        "folder": folder,
        "params": sum(p.numel() for p in model.parameters()),
        "rows": int(input_ids.shape[0]),
        "mean_len": best["tokens"] / input_ids.shape[0],
        **best,
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="HF export folders")
    ap.add_argument("--prompts", required=True, help="JSON: {'prompt_ids': [[...]], 'n': rows per prompt, 'pad_id': int}")
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with open(args.prompts) as handle:
        spec = json.load(handle)
    for folder in args.folders:
        row = decode_rate(folder, spec["prompt_ids"], spec["n"], spec["pad_id"], args.new_tokens, args.repeats)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
