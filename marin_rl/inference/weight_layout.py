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
from marin_rl.models.arrays import ArraySlots, is_array_leaf


class WeightLayout:
    """Turns models of `template`'s structure into the sampler's laid-out model on `mesh` (see the module
    docstring). `signature` is what a model must match: tree structure and array shapes and dtypes."""

    def __init__(self, template: Any, mesh: Mesh, dtype: Any):
        self.dtype = jnp.dtype(dtype)
        leaves, treedef = jax.tree.flatten(template)
        self.slots = ArraySlots(template)  # its array slots are held empty: the template's weights may go
        self.signature = self.signature_of(leaves, treedef)
        self.in_shardings = jax.tree.leaves(weight_shardings(eqx.filter(template, is_array_leaf), mesh))
        laid_out = eqx.filter_eval_shape(self._laid_out, self.slots.take(leaves))
        self.out_slots = ArraySlots(laid_out)
        out_shardings = jax.tree.leaves(weight_shardings(eqx.filter(laid_out, is_array_leaf), mesh))
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
        placed = self.slots.take(leaves)
        # numpy leaves would be re-sent at every chunk: placed once here. Arrays already on their shards (a rollout
        # worker places pulled weights so) are left out of the transfer, which costs ~0.03 ms an array even then.
        moved = [k for k, (x, where) in enumerate(zip(placed, self.in_shardings))
                 if not (isinstance(x, jax.Array) and x.sharding == where)]
        if moved:
            for k, x in zip(moved, jax.device_put([placed[k] for k in moved], [self.in_shardings[k] for k in moved])):
                placed[k] = x
        return self.out_slots.fill(self._program(placed))

    def _laid_out(self, arrays: list) -> Any:
        cast = [x.astype(self.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x for x in arrays]
        return decode_layout(self.slots.fill(cast))

    def _flat_laid_out(self, arrays: list) -> list:
        return self.out_slots.take(jax.tree.leaves(self._laid_out(arrays)))
