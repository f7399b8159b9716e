"""The array module a formula runs in: jax.numpy for JAX arrays (and tracers, inside jit or grad), NumPy otherwise.

The trainer prepares each batch (shaping, advantages, filtering) on the host, on arrays whose shape changes with
the number of groups drawn; eager jax.numpy compiles a small XLA program for every op at every new shape (0.5-3 s a
step measured on the quickstart), NumPy none. The same formulas stay differentiable and jit-able for JAX inputs.
"""

from __future__ import annotations

from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np


def array_module(*arrays) -> ModuleType:
    """jax.numpy when any input is a jax.Array (tracers included), else numpy."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def as_float(x, xp: ModuleType):
    """`x` as a float array of at least float32 in module `xp` (ints and bools become float32)."""
    x = xp.asarray(x)
    if not xp.issubdtype(x.dtype, xp.floating):
        return x.astype(xp.float32)
    return x.astype(xp.promote_types(x.dtype, xp.float32))
