"""The pieces of an RL step that are neither sampling nor training, each timed alone on an HF export folder's
weights (medians over --repeats calls, milliseconds), one JSON line per folder:

    .venv/bin/python bench/bench_step_overheads.py [--repeats 100] [--gap-ms 50] MODEL_DIR [MODEL_DIR ...]

- to_host_ms: the trainer's model_to_arrays (the device model -> the host arrays a channel publishes);
- shm_publish_ms / shm_fetch_ms: SharedMemoryChannel.publish (copy into the slot + checksum) and a verified fetch in
  place, in this process, --gap-ms apart as steps are; once with the checksum pool as configured
  (weight_checksum.PARALLEL_MIN_BYTES) and once forced through the pool (`_pool` keys), so the threshold can be
  checked on this machine;
- place_ms: WeightPlacement.model of the fetched arrays onto the sampler's one-device mesh, as a rollout worker
  places a swap's weights (not copied: on the CPU the placed arrays may alias the slot);
- layout_ms: WeightLayout of the placed model, to its finish (what Sampler.set_weights(lent=True) runs at every
  swap, before the slot is released: the sampler's own copy of the weights);
- pickle_ms / unpickle_ms: Ray's cloudpickle of the groups one step ships (--groups x --group-size rollouts of
  random lengths up to 32 tokens).

bench/peers_weight_sync.py times the channels against a memcpy across processes; this script splits a sync step's
overhead into its parts (docs/benchmarks.md "Stop 36").
"""

from __future__ import annotations

import argparse
import json
import pickle
import shutil
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from ray import cloudpickle

from marin_rl.inference.mesh_placement import single_device_mesh
from marin_rl.inference.weight_layout import WeightLayout
from marin_rl.models.hf_io import import_hf
from marin_rl.models.tokenizer import build_char_tokenizer
from marin_rl.rollouts import Rollout, RolloutGroup
from marin_rl.runtime import weight_checksum
from marin_rl.runtime.allocator import reexec_with_allocator
from marin_rl.runtime.weight_sync import SharedMemoryChannel, WeightPlacement, make_shm_dir, model_to_arrays


def median_ms(fn, repeats: int, gap_s: float = 0.0) -> float:
    """The median wall-clock milliseconds of fn() over `repeats` calls after one warm-up, `gap_s` asleep before each."""
    fn()
    times = []
    for _ in range(repeats):
        time.sleep(gap_s)
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def shm_ms(arrays: list[np.ndarray], repeats: int, gap_s: float) -> tuple[float, float]:
    """(publish ms, fetch ms) medians of SharedMemoryChannel after one lap of its slot ring."""
    directory = make_shm_dir()
    try:
        channel = SharedMemoryChannel(directory)
        publish, fetch = [], []
        for version in range(channel.slots + repeats):
            time.sleep(gap_s)
            t = time.perf_counter()
            packet = channel.publish(arrays, version)
            publish.append(time.perf_counter() - t)
            t = time.perf_counter()
            with channel.fetched(packet, timeout_s=60):
                pass
            fetch.append(time.perf_counter() - t)
        return 1e3 * statistics.median(publish[channel.slots:]), 1e3 * statistics.median(fetch[channel.slots:])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def random_groups(groups: int, group_size: int, seed: int = 0) -> list[RolloutGroup]:
    """Rollout groups shaped like a mock-task step's: prompts of 1-24 tokens, answers of 0-31."""
    rng = np.random.default_rng(seed)

    def rollout(i: int) -> Rollout:
        answer, prompt = int(rng.integers(0, 32)), int(rng.integers(1, 25))
        return Rollout(
            f"p{i}", "mock_reverse", rng.integers(0, 99, prompt).astype(np.int32),
            rng.integers(0, 99, answer).astype(np.int32), rng.standard_normal(answer).astype(np.float32),
            np.full(answer, 3, np.int32), float(i % 2), bool(i % 2), True, False,
        )

    return [RolloutGroup(tuple(rollout(i) for i in range(group_size))) for _ in range(groups)]


def overheads(folder: str, args) -> dict:
    tok = build_char_tokenizer()
    model = import_hf(folder, tokenizer=tok)
    arrays = model_to_arrays(model)
    row = {"folder": folder, "nbytes": sum(a.nbytes for a in arrays), "repeats": args.repeats}
    row["to_host_ms"] = median_ms(lambda: model_to_arrays(model), args.repeats)
    gap_s = args.gap_ms / 1e3
    row["shm_publish_ms"], row["shm_fetch_ms"] = shm_ms(arrays, args.repeats, gap_s)
    configured = weight_checksum.PARALLEL_MIN_BYTES
    weight_checksum.PARALLEL_MIN_BYTES = 0
    try:
        row["shm_publish_pool_ms"], row["shm_fetch_pool_ms"] = shm_ms(arrays, args.repeats, gap_s)
    finally:
        weight_checksum.PARALLEL_MIN_BYTES = configured
    mesh = single_device_mesh()  # a worker places pulled weights on its sampler's mesh, so the layout moves none
    placement = WeightPlacement(model, mesh)
    row["place_ms"] = median_ms(lambda: placement.model(arrays), args.repeats)  # as a swap places a slot's arrays
    placed = placement.model(arrays)
    layout = WeightLayout(model, mesh, jnp.float32)
    row["layout_ms"] = median_ms(lambda: jax.block_until_ready(layout(placed)), args.repeats)
    groups = random_groups(args.groups, args.group_size)
    row["pickle_ms"] = median_ms(lambda: cloudpickle.dumps(groups), args.repeats)
    blob = cloudpickle.dumps(groups)
    row["unpickle_ms"] = median_ms(lambda: pickle.loads(blob), args.repeats)
    row["pickled_bytes"] = len(blob)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="HF export folders (bench/peers.py writes them to <out>/models)")
    ap.add_argument("--repeats", type=int, default=100, help="timed calls per piece (the median is reported)")
    ap.add_argument("--gap-ms", type=float, default=50.0,
                    help="sleep before each publish, as between steps (idle checksum threads must wake up)")
    ap.add_argument("--groups", type=int, default=4, help="rollout groups shipped per step (prompts)")
    ap.add_argument("--group-size", type=int, default=8, help="rollouts per group (generations)")
    args = ap.parse_args()
    reexec_with_allocator(True)  # as every Ray actor of an RL run starts (hardware.malloc_hugepages)
    for folder in args.folders:
        print(json.dumps(overheads(folder, args)), flush=True)


if __name__ == "__main__":
    main()
