"""Weight sync seconds (marin_rl/runtime/weight_sync.py) against a numpy memcpy of the same bytes: one JSON line per folder.

    .venv/bin/python bench/peers_weight_sync.py --repeats 3 --scratch DIR MODEL_DIR [MODEL_DIR ...]

The weights are an HF export folder's arrays (import_hf, float32, as model_to_arrays hands them to a channel).
Each channel is timed as a rollout worker meets it: publish (the checksum included) in this process, then fetch
(the checksum verification included) - FileChannel in this process through the --scratch folder,
ObjectStoreChannel in a separate Ray task on a private loopback Ray with token auth, as the runtime starts it, and
SharedMemoryChannel (slots in a fresh /dev/shm folder) read in place by a Ray actor that keeps its channel across
fetches, as a rollout worker does.
memcpy: np.copyto of every array into preallocated arrays of the same shapes. Best of --repeats for each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import ray

from marin_rl.models.hf_io import import_hf
from marin_rl.runtime.ray_security import secure_ray_environment
from marin_rl.runtime.weight_sync import (
    FileChannel,
    ObjectStoreChannel,
    SharedMemoryChannel,
    WeightPacket,
    make_shm_dir,
    model_to_arrays,
)


def best_seconds(fn, repeats: int) -> float:
    """The fastest of `repeats` wall-clock timings of fn()."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def memcpy_seconds(arrays: list[np.ndarray], repeats: int) -> float:
    """np.copyto of every array into a preallocated twin (the floor any channel pays to move the bytes once)."""
    dest = [np.empty_like(a) for a in arrays]
    return best_seconds(lambda: [np.copyto(d, a) for d, a in zip(dest, arrays, strict=True)], repeats)


def file_channel_seconds(arrays: list[np.ndarray], scratch: Path, repeats: int) -> tuple[float, float]:
    """(publish s, fetch s) of FileChannel through `scratch`, best of `repeats` each."""
    channel = FileChannel(scratch)
    publish, fetch = [], []
    for version in range(repeats):
        t = time.perf_counter()
        packet = channel.publish(arrays, version)
        publish.append(time.perf_counter() - t)
        t = time.perf_counter()
        channel.fetch(packet, timeout_s=60)
        fetch.append(time.perf_counter() - t)
    return min(publish), min(fetch)


@ray.remote(num_cpus=1)
def _timed_fetch(packet: WeightPacket) -> float:
    """Seconds one ObjectStoreChannel.fetch takes in another worker process (a rollout worker's view)."""
    t = time.perf_counter()
    ObjectStoreChannel().fetch(packet, timeout_s=60)
    return time.perf_counter() - t


def object_store_seconds(arrays: list[np.ndarray], repeats: int) -> tuple[float, float]:
    """(publish s, fetch s) of ObjectStoreChannel, the fetch in a Ray task, best of `repeats` each."""
    channel = ObjectStoreChannel()
    ray.get(_timed_fetch.remote(channel.publish([np.zeros(1, np.float32)], -1)))  # start the worker process
    publish, fetch = [], []
    for version in range(repeats):
        t = time.perf_counter()
        packet = channel.publish(arrays, version)
        publish.append(time.perf_counter() - t)
        fetch.append(ray.get(_timed_fetch.remote(packet)))
    return min(publish), min(fetch)


@ray.remote(num_cpus=0)
class _SharedMemoryReader:
    """A rollout worker's side of SharedMemoryChannel: one channel (and its slot mappings) across fetches."""

    def __init__(self, directory: str):
        self.channel = SharedMemoryChannel(directory)

    def timed_fetch(self, packet: WeightPacket) -> float:
        """Seconds to lend the verified arrays in place (what the worker does before placing them)."""
        t = time.perf_counter()
        with self.channel.fetched(packet, timeout_s=60):
            pass
        return time.perf_counter() - t


def shared_memory_seconds(arrays: list[np.ndarray], repeats: int) -> tuple[float, float]:
    """(publish s, fetch s) of SharedMemoryChannel, the fetch in a Ray actor; best of `repeats` after one lap of the
    slot ring (a run reuses its slots every step; the first lap creates them)."""
    directory = make_shm_dir()
    try:
        channel = SharedMemoryChannel(directory)
        reader = _SharedMemoryReader.remote(str(directory))
        publish, fetch = [], []
        for version in range(channel.slots + repeats):
            t = time.perf_counter()
            packet = channel.publish(arrays, version)
            publish.append(time.perf_counter() - t)
            fetch.append(ray.get(reader.timed_fetch.remote(packet)))
        ray.kill(reader)
        return min(publish[channel.slots:]), min(fetch[channel.slots:])
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", help="HF export folders")
    ap.add_argument("--scratch", required=True, help="folder for FileChannel's .npz files")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    secure_ray_environment(local=True)
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False
    )
    try:
        for folder in args.folders:
            arrays = model_to_arrays(import_hf(folder))
            nbytes = sum(a.nbytes for a in arrays)
            memcpy = memcpy_seconds(arrays, args.repeats)
            file_pub, file_fetch = file_channel_seconds(arrays, Path(args.scratch) / Path(folder).name, args.repeats)
            obj_pub, obj_fetch = object_store_seconds(arrays, args.repeats)
            shm_pub, shm_fetch = shared_memory_seconds(arrays, args.repeats)
            print(json.dumps({
                "folder": folder, "nbytes": nbytes, "arrays": len(arrays), "memcpy_s": memcpy,
                "files_publish_s": file_pub, "files_fetch_s": file_fetch,
                "object_store_publish_s": obj_pub, "object_store_fetch_s": obj_fetch,
                "shared_memory_publish_s": shm_pub, "shared_memory_fetch_s": shm_fetch,
            }), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
