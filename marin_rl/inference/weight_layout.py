"""Weights as the decode loop wants them: on their shards of the sampler's mesh, floating ones cast to the compute
dtype, laid out by inference/decoder.py decode_layout, all in one compiled program per weight structure.

The program is a plain `jax.jit` over the flat list of array leaves; the tree is taken apart and put back around
it with structures worked out once. Why: `eqx.filter_jit` split and hashed the Haliax tree and rebuilt every
NamedArray at each call: `Sampler.set_weights` of a 0.15M model took 3.9 ms that way, 1.6 ms this way (medians of
100, docs/benchmarks.md "Stop 35"). Every swap lands on the very same placement (the outputs' shardings are pinned),
so the decode kernels never recompile or reshard.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from marin_rl.inference.decoder import decode_layout
from marin_rl.inference.mesh_placement import weight_shardings


def _is_weight(x: Any) -> bool:
    """An array leaf, concrete or abstract (eqx.filter_eval_shape gives ShapeDtypeStructs)."""
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def _array_positions(leaves: list) -> list[int]:
    return [i for i, x in enumerate(leaves) if _is_weight(x)]


class WeightLayout:
    """Turns models of `template`'s structure into the sampler's laid-out model on `mesh` (see the module
    docstring). `signature` is what a model must match: tree structure and array shapes and dtypes."""

    def __init__(self, template: Any, mesh: Mesh, dtype: Any):
        self.dtype = jnp.dtype(dtype)
        leaves, self.treedef = jax.tree.flatten(template)
        self.arrays_at = _array_positions(leaves)
        at = set(self.arrays_at)  # array slots filled at each call (held empty: the template's weights may go)
        self.other_leaves = [None if i in at else x for i, x in enumerate(leaves)]
        self.signature = self.signature_of(leaves, self.treedef)
        self.in_shardings = jax.tree.leaves(weight_shardings(eqx.filter(template, _is_weight), mesh))
        laid_out = eqx.filter_eval_shape(self._laid_out, [leaves[i] for i in self.arrays_at])
        out_leaves, self.out_treedef = jax.tree.flatten(laid_out)
        self.out_arrays_at = _array_positions(out_leaves)
        self.out_other_leaves = out_leaves
        out_shardings = jax.tree.leaves(weight_shardings(eqx.filter(laid_out, _is_weight), mesh))
        self._program = jax.jit(self._flat_laid_out, out_shardings=out_shardings)

    def signature_of(self, leaves: list, treedef: Any) -> tuple:
        """Tree structure + leaf shapes and dtypes (floating ones as cast): what a swap must not change."""
        return treedef, tuple((getattr(x, "shape", None), self._cast_dtype(x)) for x in leaves)

    def _cast_dtype(self, x: Any) -> str:
        dtype = getattr(x, "dtype", None)
        if dtype is None:
            return str(type(x))
        return str(self.dtype if jnp.issubdtype(dtype, jnp.floating) else dtype)

    def __call__(self, model: Any) -> Any:
        """`model` laid out on the mesh; raises ValueError if its structure, shapes or dtypes differ from the
        template's."""
        leaves, treedef = jax.tree.flatten(model)
        if self.signature_of(leaves, treedef) != self.signature:
            raise ValueError(
                "set_weights: the new model's structure or parameter shapes/dtypes differ from the sampler's "
                "(a swap must not change shapes; build a new Sampler for a different model)"
            )
        placed = [leaves[i] for i in self.arrays_at]
        # numpy leaves would be re-sent at every chunk: placed once here. Arrays already on their shards (a rollout
        # worker places pulled weights so) are left out of the transfer, which costs ~0.03 ms an array even then.
        moved = [k for k, (x, where) in enumerate(zip(placed, self.in_shardings))
                 if not (isinstance(x, jax.Array) and x.sharding == where)]
        if moved:
            for k, x in zip(moved, jax.device_put([placed[k] for k in moved], [self.in_shardings[k] for k in moved])):
                placed[k] = x
        out_leaves = list(self.out_other_leaves)
        for i, x in zip(self.out_arrays_at, self._program(placed), strict=True):
            out_leaves[i] = x
        return jax.tree.unflatten(self.out_treedef, out_leaves)

    def _laid_out(self, arrays: list) -> Any:
        leaves = list(self.other_leaves)
        for i, x in zip(self.arrays_at, arrays, strict=True):
            leaves[i] = x.astype(self.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x
        return decode_layout(jax.tree.unflatten(self.treedef, leaves))

    def _flat_laid_out(self, arrays: list) -> list:
        out_leaves = jax.tree.leaves(self._laid_out(arrays))
        return [out_leaves[i] for i in self.out_arrays_at]
