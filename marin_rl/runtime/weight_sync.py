"""Weight sync from the trainer to rollout workers: versioned, checksummed, all-or-nothing.

The trainer publishes a `WeightPacket` (version, checksum, and a Ray object ref, a file path or a shared-memory slot);
a rollout worker fetches it with a timeout, verifies the checksum and every leaf's shape and dtype against its own
model, and only then swaps the weights in. A partial, corrupt or mismatched set raises `WeightSyncError` and the worker
keeps sampling with the weights it had; a worker that has never received weights does not sample at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from marin_rl.models.arrays import ArraySlots, is_array_leaf
from marin_rl.runlog.run_lock import pid_alive
from marin_rl.runtime.weight_checksum import arrays_checksum, buffer_checksum, copy_arrays


class WeightSyncError(RuntimeError):
    pass


class WeightsSuperseded(WeightSyncError):
    """The packet's slot already holds newer weights: ask the coordinator for the newest packet again."""


@dataclass(frozen=True)
class WeightPacket:
    version: int
    checksum: str
    nbytes: int
    refs: list | None = None  # [ObjectRef] (wrapped in a list so Ray does not resolve it in transit)
    path: str | None = None
    layout: tuple | None = None  # shared_memory: ((byte offset, shape, dtype name), ...) of each array in the slot


def model_to_arrays(model: Any) -> list[np.ndarray]:
    """The model's array leaves, in tree order, as full host numpy arrays. A leaf sharded over devices of other
    JAX processes (a trainer mesh spanning hosts) is gathered with process_allgather, a collective: then every
    process of the trainer must call this, in the same order."""
    leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))
    return [host_array(x) for x in leaves]


def host_array(x: Any) -> np.ndarray:
    """The whole value of one array on this host: np.asarray where this process holds all of it (or a full
    replica), else gathered from every process (multihost_utils.process_allgather, tiled into the global shape)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


class WeightPlacement:
    """How a list of host arrays becomes `template`'s model, each array on its shards of `mesh` when one is given
    (inference/mesh_placement.py), else on the default device. Worked out once per worker: the tree walks and the
    sharding inference cost more than placing a 0.15M-parameter model's arrays (docs/benchmarks.md, stop 32)."""

    def __init__(self, template: Any, mesh: Any = None):
        self.slots = ArraySlots(template)
        self.shardings = None
        if mesh is not None:
            from marin_rl.inference.mesh_placement import weight_shardings

            self.shardings = jax.tree_util.tree_leaves(weight_shardings(eqx.filter(template, is_array_leaf), mesh))

    def model(self, arrays: list[np.ndarray], lent: bool = False) -> Any:
        """The model carrying `arrays`; every shape and dtype must match (else WeightSyncError).
        lent: the arrays' memory is reused once this returns (a shared-memory slot) while the model is kept, so
        every placed array must be a copy: on the CPU jax.device_put may alias a numpy array's memory instead of
        copying it. Without it the placed arrays may alias `arrays` (a swap places a slot's arrays so, and
        Sampler.set_weights(lent=True) copies them before the slot is released)."""
        if len(self.slots.specs) != len(arrays):
            raise WeightSyncError(f"weight set has {len(arrays)} arrays, the model has {len(self.slots.specs)}")
        for i, ((shape, dtype), new) in enumerate(zip(self.slots.specs, arrays)):
            if shape != new.shape or dtype != new.dtype:
                raise WeightSyncError(
                    f"weight #{i}: got {new.dtype}{list(new.shape)}, the model has {dtype}{list(shape)}"
                )
        if self.shardings is not None:  # one batched transfer; a lent array's copy becomes its buffer
            placed = jax.device_put([np.array(a) if lent else a for a in arrays], self.shardings)
        else:  # jax.device_put of a fresh copy: the copy is the buffer; jnp.asarray copies plain arrays itself
            placed = [jax.device_put(np.array(a)) if lent else jax.numpy.asarray(a) for a in arrays]
        return self.slots.fill(jax.block_until_ready(placed))


def arrays_into_model(template: Any, arrays: list[np.ndarray], mesh: Any = None, lent: bool = False) -> Any:
    """A copy of `template` carrying `arrays` (see WeightPlacement, for a worker that places weights every step)."""
    return WeightPlacement(template, mesh).model(arrays, lent)


class Channel:
    """How weights travel from the trainer to the rollout workers. Subclasses define publish, and fetch (owned
    arrays) or, for a channel that lends its memory, fetched itself."""

    method: str
    lends_memory = False  # fetched arrays are views of memory the channel reuses (place them inside `fetched`)

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        raise NotImplementedError

    def fetch(self, packet: WeightPacket, timeout_s: float) -> list[np.ndarray]:
        raise NotImplementedError

    @contextlib.contextmanager
    def fetched(self, packet: WeightPacket, timeout_s: float) -> Iterator[list[np.ndarray]]:
        """The verified arrays of `packet`, valid inside the with-block (a lending channel reuses them after)."""
        yield self.fetch(packet, timeout_s)


class ObjectStoreChannel(Channel):
    """Weights travel through the Ray object store (shared memory on one node, object transfer across nodes)."""

    method = "object_store"

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        import ray

        ref = ray.put(arrays)
        return WeightPacket(version, arrays_checksum(arrays), sum(a.nbytes for a in arrays), refs=[ref])

    def fetch(self, packet: WeightPacket, timeout_s: float) -> list[np.ndarray]:
        import ray

        try:
            arrays = ray.get(packet.refs[0], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as err:
            raise WeightSyncError(f"weights v{packet.version} did not arrive within {timeout_s}s") from err
        return verified(arrays, packet)


class FileChannel(Channel):
    """Weights travel as .npz files on shared storage (written to a temp name, then renamed: never partial)."""

    method = "files"

    def __init__(self, directory: str | Path, keep: int = 2):
        self.dir = Path(directory)
        self.keep = keep

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / f"weights_v{version:08d}.npz"
        tmp = self.dir / f".weights_v{version:08d}.{os.getpid()}.tmp.npz"
        np.savez(tmp, *arrays)
        os.replace(tmp, final)
        for old in sorted(self.dir.glob("weights_v*.npz"))[: -self.keep]:
            old.unlink(missing_ok=True)
        return WeightPacket(version, arrays_checksum(arrays), sum(a.nbytes for a in arrays), path=str(final))

    def fetch(self, packet: WeightPacket, timeout_s: float) -> list[np.ndarray]:
        deadline = time.monotonic() + timeout_s
        path = Path(packet.path)
        while not path.exists():
            if time.monotonic() > deadline:
                raise WeightSyncError(f"weights file {path} (v{packet.version}) did not appear within {timeout_s}s")
            time.sleep(0.05)
        with np.load(path) as data:
            arrays = [data[f"arr_{i}"] for i in range(len(data.files))]
        return verified(arrays, packet)


SHM_ROOT = Path("/dev/shm")
SHM_DIR_PREFIX = "marin_rl-weights-"
SHM_MAGIC = b"MRLWSHM1"
SHM_HEADER = struct.Struct("<8sq")  # magic, version of the weights in the slot (-1 while being written)
SHM_PAYLOAD_START = 64  # bytes: the header's room; every array starts at a multiple of SHM_ALIGN after it
SHM_ALIGN = 64
SHM_LOCK_POLL_S = 0.001
# Slots in the ring: the coordinator hands out the newest two versions (one_step_off pulls the older one), and the
# trainer writes a third while workers may still read those two.
SHM_SLOTS = 3


def aligned(nbytes: int) -> int:
    """nbytes rounded up to a multiple of SHM_ALIGN: the room an array takes in a slot."""
    return -(-nbytes // SHM_ALIGN) * SHM_ALIGN


def slot_layout(arrays: list[np.ndarray]) -> tuple[tuple, int]:
    """((offset, shape, dtype name) per array, total slot bytes): arrays back to back, each SHM_ALIGN-aligned."""
    layout, offset = [], SHM_PAYLOAD_START
    for a in arrays:
        layout.append((offset, tuple(a.shape), a.dtype.str))
        offset += aligned(a.nbytes)
    return tuple(layout), offset


def reserve_slots(directory: str | Path, size: int, slots: int = SHM_SLOTS) -> None:
    """Create the ring's slot files, `size` bytes each, their pages reserved: a tmpfs without room for them fails
    here, before any actor starts, and runs that share it cannot all count on the same free pages. WeightSyncError
    if there is no room (the files made so far stay: the caller removes the folder). `size` is the driver's estimate
    from the model config (preflight.slot_bytes); where the published weights lay out otherwise, the first publish
    into a slot resizes it and reserves again (`publish`)."""
    for k in range(slots):
        fd = os.open(Path(directory) / f"slot{k}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _reserve_pages(fd, size, directory)
        finally:
            os.close(fd)


def _reserve_pages(fd: int, size: int, where: str | Path) -> None:
    """Size the slot file `fd` to `size` bytes and reserve its pages: a tmpfs that fills up mid-copy would kill the
    writer (SIGBUS). WeightSyncError if there is no room; the file is then left empty, so that a later publish sees
    the wrong size and reserves again instead of writing unreserved pages."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as err:
        os.ftruncate(fd, 0)
        raise WeightSyncError(f"no room for {size:,} bytes of weights in {where}: {err}") from err


def slot_checksum(buffer: Any, layout: tuple) -> str:
    """weight_checksum.buffer_checksum of a slot's payload (every byte after the header: the arrays and the alignment
    gaps between them) and its layout."""
    return buffer_checksum(np.frombuffer(buffer, np.uint8, offset=SHM_PAYLOAD_START), repr(layout).encode())


def slot_arrays(buffer: Any, layout: tuple) -> list[np.ndarray]:
    """The arrays of a slot as views of `buffer` (read-only when the mapping is)."""
    return [
        np.frombuffer(buffer, np.dtype(dtype), int(np.prod(shape, dtype=np.int64)), offset).reshape(shape)
        for offset, shape, dtype in layout
    ]


def _lock(fd: int, kind: int, deadline: float, what: str) -> None:
    """flock `fd` (LOCK_SH or LOCK_EX), polling until `deadline`; WeightSyncError after it."""
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise WeightSyncError(f"{what}: still locked at the deadline") from None
            time.sleep(SHM_LOCK_POLL_S)


class SharedMemoryChannel(Channel):
    """Weights travel through a ring of SHM_SLOTS files in a tmpfs folder (/dev/shm) of this node.

    The trainer copies version v into slot v % SHM_SLOTS under an exclusive flock; a worker reads it in place
    under a shared flock, held while it places the weights (`fetched`), so the trainer never overwrites weights
    being read. A slot still read when its turn comes is unlinked and recreated (the reader keeps its inode), so
    the trainer never waits for a worker. Slots are reused, so after the first round their pages are already
    mapped: a publish is one memcpy and one hash of the slot's bytes (weight_checksum.py), where `ray.put` faults
    fresh object-store pages every time.
    One node only: RunSpec refuses it with ray.address, where workers may sit on other nodes.
    """

    method = "shared_memory"
    lends_memory = True

    def __init__(self, directory: str | Path, slots: int = SHM_SLOTS):
        self.dir = Path(directory)
        self.slots = slots
        self._maps: dict[str, tuple[int, int, mmap.mmap]] = {}  # path -> (inode, size, mapping), reused

    def _mapping(self, path: Path, fd: int, writable: bool) -> mmap.mmap:
        st = os.fstat(fd)
        cached = self._maps.get(str(path))
        if cached is None or cached[:2] != (st.st_ino, st.st_size):
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            cached = (st.st_ino, st.st_size, mmap.mmap(fd, st.st_size, prot=prot))
            self._maps[str(path)] = cached  # a replaced mapping is unmapped once no array views it
        return cached[2]

    def publish(self, arrays: list[np.ndarray], version: int) -> WeightPacket:
        layout, size = slot_layout(arrays)
        path = self.dir / f"slot{version % self.slots}"  # the driver owns the folder (make_shm_dir)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a worker still reads the weights this slot held: leave it that inode
            os.close(fd)
            path.unlink()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_size != size:
                _reserve_pages(fd, size, path.parent)
            buffer = self._mapping(path, fd, writable=True)
            SHM_HEADER.pack_into(buffer, 0, SHM_MAGIC, -1)
            copy_arrays(slot_arrays(buffer, layout), arrays)
            checksum = slot_checksum(buffer, layout)  # of the slot's bytes, as a reader will map them
            SHM_HEADER.pack_into(buffer, 0, SHM_MAGIC, version)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return WeightPacket(version, checksum, sum(a.nbytes for a in arrays), path=str(path), layout=layout)

    @contextlib.contextmanager
    def fetched(self, packet: WeightPacket, timeout_s: float) -> Iterator[list[np.ndarray]]:
        deadline = time.monotonic() + timeout_s
        what = f"weights v{packet.version} in {packet.path}"
        while True:
            try:
                fd = os.open(packet.path, os.O_RDONLY)
                break
            except FileNotFoundError:  # the trainer is recreating the slot, or this node is not the trainer's
                if time.monotonic() > deadline:
                    raise WeightSyncError(
                        f"{what}: no such slot within {timeout_s}s (rollout.weight_sync.method=shared_memory needs "
                        "the workers on the trainer's node)"
                    ) from None
                time.sleep(SHM_LOCK_POLL_S)
        try:
            _lock(fd, fcntl.LOCK_SH, deadline, what)
            if os.fstat(fd).st_size < SHM_PAYLOAD_START:  # recreated for newer weights, not yet written
                raise WeightsSuperseded(f"{what}: the slot was recreated for newer weights (superseded)")
            buffer = self._mapping(Path(packet.path), fd, writable=False)
            magic, version = SHM_HEADER.unpack_from(buffer, 0)
            if magic != SHM_MAGIC or version != packet.version:
                raise WeightsSuperseded(f"{what}: the slot now holds v{version} (superseded; newer weights follow)")
            got = slot_checksum(buffer, packet.layout)
            if got != packet.checksum:
                raise WeightSyncError(f"{what}: checksum {got} != published {packet.checksum}")
            yield slot_arrays(buffer, packet.layout)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)  # explicitly: the cached mmap holds a dup of fd, and with it the lock
            if os.fstat(fd).st_nlink == 0:  # the trainer replaced this slot: let its pages go once no view holds them
                self._maps.pop(packet.path, None)
            os.close(fd)


def make_shm_dir(root: Path = SHM_ROOT) -> Path:
    """A fresh private (0700) folder for a run's slots under `root`; first removes the folders of runs whose driver
    process is gone (a killed run cannot clean up after itself)."""
    for old in root.glob(f"{SHM_DIR_PREFIX}*-*"):
        pid = old.name[len(SHM_DIR_PREFIX):].split("-", 1)[0]
        try:
            mine = old.stat().st_uid == os.getuid()
        except FileNotFoundError:  # another run's sweep got there first
            continue
        if pid.isdigit() and mine and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{SHM_DIR_PREFIX}{os.getpid()}-", dir=root))


def verified(arrays: list[np.ndarray], packet: WeightPacket) -> list[np.ndarray]:
    got = arrays_checksum(arrays)
    if got != packet.checksum:
        raise WeightSyncError(f"weights v{packet.version}: checksum {got} != published {packet.checksum}")
    return arrays


def make_channel(method: str, directory: str | Path | None) -> Channel:
    if method == "object_store":
        return ObjectStoreChannel()
    if method in ("files", "shared_memory"):
        if directory is None:
            raise ValueError(f"method={method} needs a folder (the driver passes it)")
        return FileChannel(directory) if method == "files" else SharedMemoryChannel(directory)
    raise ValueError(f"rollout.weight_sync.method={method!r}; allowed: object_store, files, shared_memory")
