"""The weight checksums (of arrays, of a buffer) and the parallel copy: every byte counted, every byte copied."""

from __future__ import annotations

import numpy as np
import pytest

from marin_rl.runtime import weight_checksum
from marin_rl.runtime.weight_checksum import (
    CHECKSUM_PIECE_BYTES,
    arrays_checksum,
    buffer_checksum,
    copy_arrays,
)


def weight_set() -> list[np.ndarray]:
    """Arrays of several pieces and a partial one, empty, 0-d, int16, and non-contiguous."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal(CHECKSUM_PIECE_BYTES // 4 * 3 + 5).astype(np.float32)
    return [big, rng.standard_normal((7, 3)), np.zeros(0, np.float32), np.float32(2.5) * np.ones(()),
            rng.integers(0, 9, (5, 4)).astype(np.int16), rng.standard_normal((6, 8)).T]


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_checksums_and_copy_give_one_value_whatever_the_cores(monkeypatch, cores):
    arrays = weight_set()
    want, buffer = arrays_checksum(arrays), arrays[0]
    want_buffer = buffer_checksum(buffer, b"layout")
    monkeypatch.setattr(weight_checksum, "host_cores", lambda: cores)
    monkeypatch.setattr(weight_checksum, "PARALLEL_MIN_BYTES", 0)  # this small set takes the pool too
    dests = [np.empty(a.shape, a.dtype) for a in arrays]
    copy_arrays(dests, arrays)
    assert arrays_checksum(arrays) == arrays_checksum(dests) == want
    assert buffer_checksum(buffer, b"layout") == buffer_checksum(dests[0], b"layout") == want_buffer


@pytest.mark.parametrize("where", [0, CHECKSUM_PIECE_BYTES - 1, CHECKSUM_PIECE_BYTES, 3 * CHECKSUM_PIECE_BYTES + 19])
def test_checksums_change_with_any_byte(where):
    arrays = weight_set()
    before, buffer_before = arrays_checksum(arrays), buffer_checksum(arrays[0], b"layout")
    arrays[0].view(np.uint8)[where] ^= 1
    assert arrays_checksum(arrays) != before and buffer_checksum(arrays[0], b"layout") != buffer_before


def test_buffer_checksum_covers_its_header():
    assert buffer_checksum(np.zeros(8, np.uint8), b"a") != buffer_checksum(np.zeros(8, np.uint8), b"b")


def test_checksum_covers_dtype_and_shape():
    a = np.arange(12, dtype=np.float32)
    assert arrays_checksum([a]) != arrays_checksum([a.reshape(3, 4)])
    assert arrays_checksum([a]) != arrays_checksum([a.view(np.int32)])


def test_copy_arrays_copies_every_byte(monkeypatch):
    monkeypatch.setattr(weight_checksum, "PARALLEL_MIN_BYTES", 0)
    arrays = weight_set()
    dests = [np.full(a.shape, 7, a.dtype) for a in arrays]
    copy_arrays(dests, arrays)
    for d, a in zip(dests, arrays, strict=True):
        np.testing.assert_array_equal(d, a)


def test_copy_arrays_refuses_destinations_it_could_not_fill():
    a = np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        copy_arrays([np.empty((6, 4), np.float32).T], [a])
    with pytest.raises(ValueError, match="dtypes and shapes"):
        copy_arrays([np.empty((4, 6), np.float64)], [a])
