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


def is_array_leaf(x: Any) -> bool:
    """An array leaf of a model, concrete or abstract (a template from eqx.filter_eval_shape holds no data)."""
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


class ArraySlots:
    """A pytree's structure with its array leaves as numbered slots, worked out once: `take` lists a tree's arrays
    (from its flat leaves), `fill` builds a tree of that structure around a list of arrays. Why: eqx.partition and
    combine, like eqx.filter_jit, walk and rebuild a Haliax tree at every call, which cost more than moving a small
    model's weights (docs/benchmarks.md, stops 32 and 35). The template's arrays are not kept (their slots hold
    None), so its weights can be freed."""

    def __init__(self, template: Any):
        leaves, self.treedef = jax.tree.flatten(template)
        self.arrays_at = [i for i, x in enumerate(leaves) if is_array_leaf(x)]
        self.specs = [(leaves[i].shape, leaves[i].dtype) for i in self.arrays_at]
        at = set(self.arrays_at)
        self.other_leaves = [None if i in at else x for i, x in enumerate(leaves)]

    def take(self, leaves: list) -> list:
        """The array leaves among a flat leaf list of this structure, in slot order."""
        return [leaves[i] for i in self.arrays_at]

    def fill(self, arrays: list) -> Any:
        """A tree of the template's structure carrying `arrays` in its array slots."""
        leaves = list(self.other_leaves)
        for i, x in zip(self.arrays_at, arrays, strict=True):
            leaves[i] = x
        return jax.tree.unflatten(self.treedef, leaves)
