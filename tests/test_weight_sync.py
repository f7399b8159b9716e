"""Weight sync: versioned, checksummed transfers; mismatched or corrupt sets are refused."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest

from marin_rl.runtime.weight_sync import (
    FileChannel,
    WeightPacket,
    WeightSyncError,
    arrays_checksum,
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
