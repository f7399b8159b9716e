"""Low-level array helpers shared by models, training and checkpoints: dtype names and casts, the local mesh."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def resolve_dtype(dtype: Any) -> jnp.dtype:
    """'float32' | 'bfloat16' | a jnp dtype -> jnp dtype (error names the allowed strings)."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype={dtype!r} is not supported; allowed: {sorted(DTYPES)}")
        return DTYPES[dtype]
    return jnp.dtype(dtype)


def cast_floating(tree: Any, dtype: Any) -> Any:
    """Cast every floating-point array leaf of a pytree (model, grads) to `dtype`; other leaves untouched."""
    dtype = resolve_dtype(dtype)

    def cast(x):
        if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != dtype:
            return x.astype(dtype)
        return x

    return jax.tree.map(cast, tree)


def local_mesh() -> jax.sharding.Mesh:
    """A one-axis mesh over the local devices: Levanter's converter and checkpoint code need a mesh in context."""
    import numpy as np

    return jax.sharding.Mesh(np.array(jax.local_devices()), ("data",))
