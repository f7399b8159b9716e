"""Our sampler (marin_rl.inference.sampler.Sampler) on HF export folders: decode tokens/s as one JSON line per folder.

    .venv/bin/python bench/peers_ours_sampler.py --prompts P.json --new-tokens 128 --repeats 3 DIR [DIR ...]
    .venv/bin/python bench/peers_ours_sampler.py --rows-split 2 ...   # rows over 2 simulated CPU devices
    .venv/bin/python bench/peers_ours_sampler.py --weights-split 2 ... # weights over 2 (tensor parallel)

The side-by-side partner of bench/peers_hf_generate.py (same prompt token ids from --prompts, same rows, same
number of new tokens): the model is loaded from the folder with marin_rl.models.hf_io.import_hf, EOS is not a
stop (every row decodes --new-tokens tokens), temperature 1. The rate is the best of --repeats after one compile
call. bench/peers.py runs this; it reads the JSON lines. --rows-split N runs the sampler as a rollout worker with
hardware.rollout_mesh.data=N does on the CPU: N simulated host devices in this process, the rows split over them;
--weights-split M as one with hardware.rollout_mesh.model=M: attention heads, MLP width and vocabulary split over M
devices (tensor parallel), every device decoding every row.
"""

from __future__ import annotations

import argparse
import json
import os

import jax

from marin_rl.config.spec import SamplerConfig
from marin_rl.inference.mesh_placement import MESH_KEY
from marin_rl.inference.sampler import Sampler
from marin_rl.models.hf_io import import_hf
from marin_rl.models.policy import count_params
from marin_rl.models.tokenizer import build_char_tokenizer
from marin_rl.runtime.actor_devices import with_device_count
from marin_rl.runtime.allocator import reexec_with_allocator
from marin_rl.training.mesh import build_mesh


def decode_rate(
    folder: str, prompts: list[list[int]], n: int, new_tokens: int, chunk: int, repeats: int, rows_split: int,
    weights_split: int,
) -> dict:
    """Best-of-`repeats` response tokens/s of `len(prompts) * n` rows x `new_tokens` after a compile call, the rows
    split over `rows_split` devices and the weights over `weights_split`."""
    tok = build_char_tokenizer()
    tok.eos_token = None  # no EOS stop: every row decodes the full budget (a steady-state rate)
    model = import_hf(folder, tokenizer=tok)
    cfg = SamplerConfig(name="levanter", temperature=1.0, max_new_tokens=new_tokens, decode_chunk=chunk)
    devices = jax.devices()[: rows_split * weights_split]
    mesh = build_mesh({"data": rows_split, "fsdp": 1, "model": weights_split}, devices, key=MESH_KEY)
    sampler = Sampler(model, tok, cfg, model.config.seq_len, max_batch=len(prompts) * n, mesh=mesh)
    sampler.generate(prompts, n, key=jax.random.PRNGKey(0))  # compile
    runs = []
    for r in range(repeats):
        out = sampler.generate(prompts, n, key=jax.random.PRNGKey(r + 1))
        lengths = [len(c.tokens) for group in out for c in group]
        runs.append({**sampler.last_stats, "mean_len": sum(lengths) / len(lengths)})
    best = max(runs, key=lambda s: s["tokens_per_s"])
    return {
        "folder": folder,
        "params": count_params(model),
        "rows": len(prompts) * n,
        "rows_split": rows_split,
        "weights_split": weights_split,
        "decode_chunk": chunk,
        "tokens_per_s": best["tokens_per_s"],
        "tokens": best["tokens"],
        "seconds": best["seconds"],
        "mean_len": best["mean_len"],
        "device": str(jax.devices()[0]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="HF export folders (marin_rl.models.hf_io.export_hf)")
    ap.add_argument("--prompts", required=True, help="JSON: {'prompt_ids': [[int, ...], ...], 'n': rows per prompt}")
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--chunk", type=int, default=SamplerConfig.model_fields["decode_chunk"].default,
                    help="decode steps per jitted chunk (sampler.decode_chunk; default: the config's, %(default)s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--malloc-hugepages", choices=["on", "off"], default="on",
                    help="hardware.malloc_hugepages, as a rollout worker starts (conf/hardware/cpu.yaml: on)")
    ap.add_argument("--rows-split", type=int, default=1,
                    help="hardware.rollout_mesh.data: simulated CPU devices the rows are split over (1 = one device)")
    ap.add_argument("--weights-split", type=int, default=1,
                    help="hardware.rollout_mesh.model: simulated CPU devices the weights are split over (tensor "
                    "parallel; 1 = none)")
    args = ap.parse_args()
    # read when jax first creates its CPU client, which nothing above has done yet
    os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""), args.rows_split * args.weights_split)
    reexec_with_allocator(args.malloc_hugepages == "on")
    with open(args.prompts) as handle:
        spec = json.load(handle)
    for folder in args.folders:
        row = decode_rate(
            folder, spec["prompt_ids"], spec["n"], args.new_tokens, args.chunk, args.repeats, args.rows_split,
            args.weights_split,
        )
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
