"""Every random stream of a run, derived from the run seed: `derive_seed(seed, "purpose", ...)`.

A stream is named by its purpose and the indices that tell its instances apart (a worker id, an incarnation, a
policy version). The derivation is a hash, so streams with different names are independent, a name always gives
the same stream in any process, and nothing depends on the clock. In a sync run every round of sampling draws
from (seed, worker, incarnation, version): a run resumed from a checkpoint redraws exactly what the uninterrupted
run drew, so no generator state needs to be saved.
"""

from __future__ import annotations

import hashlib

import numpy as np

SEED_BITS = 31  # fits jax.random.PRNGKey, numpy and Python seeds alike


def derive_seed(seed: int, *purpose: str | int) -> int:
    """int(sha256("seed/purpose/...")) mod 2^31: one independent, reproducible seed per named stream."""
    text = "/".join(str(part) for part in (int(seed), *purpose))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") % (2**SEED_BITS)


def numpy_rng(seed: int, *purpose: str | int) -> np.random.Generator:
    """A numpy Generator for the stream (seed, *purpose)."""
    return np.random.default_rng(derive_seed(seed, *purpose))


def jax_key(seed: int, *purpose: str | int):
    """A jax PRNG key for the stream (seed, *purpose)."""
    import jax

    return jax.random.PRNGKey(derive_seed(seed, *purpose))
