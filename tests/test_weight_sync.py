"""Weight sync: versioned, checksummed transfers; mismatched or corrupt sets are refused."""

from __future__ import annotations

import os

import equinox as eqx
import jax
import numpy as np
import pytest

from marin_rl.runtime.weight_checksum import arrays_checksum
from marin_rl.runtime.weight_sync import (
    FileChannel,
    WeightPacket,
    WeightSyncError,
    arrays_into_model,
    model_to_arrays,
    verified,
)


class Tiny(eqx.Module):
    w: jax.Array
    b: jax.Array
    name: str = eqx.field(static=True, default="tiny")


def make(seed: int) -> Tiny:
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return Tiny(jax.random.normal(k1, (3, 4)), jax.random.normal(k2, (4,)))


def test_round_trip_through_arrays():
    src, template = make(0), make(1)
    out = arrays_into_model(template, model_to_arrays(src))
    np.testing.assert_array_equal(out.w, src.w)
    assert out.name == "tiny"


def test_shape_mismatch_is_refused():
    arrays = model_to_arrays(make(0))
    arrays[0] = np.zeros((2, 2), np.float32)
    with pytest.raises(WeightSyncError, match="weight #0"):
        arrays_into_model(make(1), arrays)


def test_checksum_detects_corruption():
    arrays = model_to_arrays(make(0))
    packet = WeightPacket(version=3, checksum=arrays_checksum(arrays), nbytes=0)
    arrays[1] = arrays[1] + 1e-7
    with pytest.raises(WeightSyncError, match="checksum"):
        verified(arrays, packet)


def test_file_channel_publish_fetch_and_keeps_last(tmp_path):
    ch = FileChannel(tmp_path, keep=2)
    packets = [ch.publish(model_to_arrays(make(v)), v) for v in range(3)]
    assert len(list(tmp_path.glob("weights_v*.npz"))) == 2
    got = ch.fetch(packets[-1], timeout_s=1)
    np.testing.assert_array_equal(got[0], np.asarray(make(2).w))
    with pytest.raises(WeightSyncError, match="did not appear"):
        ch.fetch(packets[0], timeout_s=0.1)  # pruned: the worker keeps its old weights


def test_object_store_channel_round_trip_and_checksum(tmp_path):
    """The channel the default run uses: weights through Ray's object store, verified against the checksum."""
    import ray
    from spec_helpers import compose_spec

    from marin_rl.runtime.ray_cluster import init_ray
    from marin_rl.runtime.weight_sync import ObjectStoreChannel

    assert init_ray(compose_spec(["recipe=quickstart", "ray.num_cpus=1"]), tmp_path)
    try:
        channel = ObjectStoreChannel()
        arrays = model_to_arrays(make(4))
        packet = channel.publish(arrays, version=4)
        assert packet.version == 4 and packet.nbytes == sum(a.nbytes for a in arrays)
        for got, want in zip(channel.fetch(packet, timeout_s=10), arrays, strict=True):
            np.testing.assert_array_equal(got, want)
        tampered = WeightPacket(4, arrays_checksum(model_to_arrays(make(5))), packet.nbytes, refs=packet.refs)
        with pytest.raises(WeightSyncError, match="checksum"):
            channel.fetch(tampered, timeout_s=10)
    finally:
        ray.shutdown()


def test_shape_only_template_takes_weights():
    """A rollout worker holds eqx.filter_eval_shape's structure (no arrays) until the first weights arrive."""
    structure = eqx.filter_eval_shape(make, 0)
    assert isinstance(structure.w, jax.ShapeDtypeStruct)
    model = arrays_into_model(structure, model_to_arrays(make(3)))
    np.testing.assert_array_equal(model.w, make(3).w)
    with pytest.raises(WeightSyncError, match="weight #0"):
        arrays_into_model(structure, [np.zeros((2, 2), np.float32), np.zeros(4, np.float32)])


def test_shared_memory_channel_lends_the_newest_weights_and_never_overwrites_a_slot_being_read(tmp_path):
    """method=shared_memory: a ring of slots; a slot read under `fetched` is left to its reader (the trainer writes
    a new file in its place), a reused slot answers for its new version only, and a corrupt slot is refused."""
    from marin_rl.inference.mesh_placement import single_device_mesh
    from marin_rl.runtime.weight_sync import SharedMemoryChannel

    writer, reader = SharedMemoryChannel(tmp_path, slots=2), SharedMemoryChannel(tmp_path, slots=2)
    want = {v: model_to_arrays(make(v)) for v in range(4)}
    packets = {0: writer.publish(want[0], 0)}
    assert packets[0].nbytes == sum(a.nbytes for a in want[0])
    with reader.fetched(packets[0], timeout_s=1) as arrays:
        inode = (tmp_path / "slot0").stat().st_ino
        packets[1] = writer.publish(want[1], 1)
        packets[2] = writer.publish(want[2], 2)  # slot0's turn while it is read: a new file takes the name
        assert (tmp_path / "slot0").stat().st_ino != inode
        for got, expected in zip(arrays, want[0], strict=True):
            np.testing.assert_array_equal(got, expected)  # the lent weights are untouched
            assert not got.flags.writeable
    packets[3] = writer.publish(want[3], 3)  # slot1, free: rewritten in place
    for v in (2, 3):
        with reader.fetched(packets[v], timeout_s=1) as arrays:
            for got, expected in zip(arrays, want[v], strict=True):
                np.testing.assert_array_equal(got, expected)
    with pytest.raises(WeightSyncError, match="superseded"), reader.fetched(packets[1], timeout_s=1):
        pass  # slot1 holds v3 now: the worker keeps its weights, pulls v3
    inode = (tmp_path / "slot0").stat().st_ino
    with reader.fetched(writer.publish(want[0], 4), timeout_s=1) as arrays:  # slot0 again, released: in place
        # what a worker keeps must not alias the slot (on the CPU device_put can alias numpy memory)
        placed = [arrays_into_model(make(9), arrays, mesh, lent=True) for mesh in (None, single_device_mesh())]
    writer.publish(want[1], 6)  # slot0 rewritten in place under the placed weights
    assert (tmp_path / "slot0").stat().st_ino == inode
    for model in placed:
        np.testing.assert_array_equal(model.w, np.asarray(make(0).w))
    with open(tmp_path / "slot1", "r+b") as slot:  # flip one byte of v3's payload
        slot.seek(packets[3].layout[0][0])
        byte = slot.read(1)
        slot.seek(packets[3].layout[0][0])
        slot.write(bytes([byte[0] ^ 1]))
    with pytest.raises(WeightSyncError, match="checksum"), reader.fetched(packets[3], timeout_s=1):
        pass
    elsewhere = WeightPacket(5, "x", 0, path=str(tmp_path / "elsewhere"), layout=())
    with pytest.raises(WeightSyncError, match="trainer's node"), reader.fetched(elsewhere, timeout_s=0.05):
        pass


def test_stale_shared_memory_folders_of_dead_drivers_are_removed(tmp_path):
    import subprocess

    from marin_rl.runtime.weight_sync import SHM_DIR_PREFIX, make_shm_dir

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = tmp_path / f"{SHM_DIR_PREFIX}{dead.pid}-abc", tmp_path / f"{SHM_DIR_PREFIX}{os.getppid()}-def"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "slot0").write_bytes(b"weights")
    fresh = make_shm_dir(tmp_path)
    assert not stale.exists() and live.exists() and fresh.exists()
    assert fresh.name.startswith(f"{SHM_DIR_PREFIX}{os.getpid()}-") and fresh.stat().st_mode & 0o777 == 0o700


def test_a_shared_memory_slot_checksum_covers_its_gaps_and_layout_and_a_reserved_ring_takes_publishes(tmp_path):
    """reserve_slots makes the ring at its final size (a publish then writes in place); the slot's checksum covers
    every payload byte, the alignment gaps too, and the layout the reader is told."""
    from marin_rl.runtime.weight_sync import SharedMemoryChannel, reserve_slots, slot_layout

    arrays = [np.arange(3, dtype=np.float32), np.ones((2, 5), np.float32)]  # 12 bytes: a gap of 52 after it
    layout, size = slot_layout(arrays)
    reserve_slots(tmp_path, size, slots=2)
    inodes = [(tmp_path / f"slot{k}").stat().st_ino for k in range(2)]
    channel = SharedMemoryChannel(tmp_path, slots=2)
    packet = channel.publish(arrays, 0)
    assert [(tmp_path / f"slot{k}").stat().st_ino for k in range(2)] == inodes and packet.layout == layout
    with channel.fetched(packet, timeout_s=1) as got:
        np.testing.assert_array_equal(got[1], arrays[1])
    shifted = ((layout[0][0] + 4, (3,), "<f4"), *layout[1:])  # the same bytes read as other arrays
    moved = WeightPacket(0, packet.checksum, packet.nbytes, path=packet.path, layout=shifted)
    with pytest.raises(WeightSyncError, match="checksum"), channel.fetched(moved, timeout_s=1):
        pass
    with open(packet.path, "r+b") as slot:  # a byte of the gap after the first array
        slot.seek(layout[0][0] + arrays[0].nbytes + 1)
        slot.write(b"\x01")
    with pytest.raises(WeightSyncError, match="checksum"), channel.fetched(packet, timeout_s=1):
        pass


def test_the_ring_the_driver_reserves_has_the_size_the_trainer_publishes():
    """preflight.slot_bytes (from the config, before any model exists) = slot_layout of the built policy's published
    arrays, so a publish into a reserved slot writes in place (a mismatch would resize the slot at its first publish)."""
    from spec_helpers import compose_spec

    from marin_rl.config.preflight import slot_bytes
    from marin_rl.models.policy import build_policy
    from marin_rl.runtime.weight_sync import slot_layout

    spec = compose_spec(["recipe=quickstart"])
    model, _, _ = build_policy(spec.model, jax.random.PRNGKey(0))
    assert slot_layout(model_to_arrays(model))[1] == slot_bytes(spec)
