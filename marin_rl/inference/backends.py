"""The sampler a run's `hardware.inference_backend` names: the Levanter KV-cache sampler or a vLLM engine.

Both have the same interface (generate / set_weights / reseed / version / close) and the same Completion contract,
so rollout workers, evaluation and synthetic-data generation never ask which one they hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from marin_rl.inference.sampler import Sampler
from marin_rl.models.arrays import resolve_dtype

if TYPE_CHECKING:
    from marin_rl.config.spec import RunSpec


def build_sampler(
    spec: "RunSpec", model: Any, tokenizer: Any, *, version: int, seed: int, workdir: str | Path, mesh: Any = None
):
    """A sampler over `model` for this run; `workdir` holds the vLLM engine's exported model and log; `mesh` the
    Levanter sampler's devices (hardware.rollout_mesh; default one device)."""
    backend = spec.hardware.inference_backend
    if backend == "vllm":
        from marin_rl.inference.vllm_sampler import VllmSampler

        return VllmSampler(
            model, tokenizer, spec.sampler, spec.model.max_seq_len, spec.hardware.vllm, workdir,
            version=version, seed=seed, kv_on_swap=spec.rollout.kv_on_swap, dtype=spec.hardware.compute_dtype,
        )
    if backend != "levanter":  # RunSpec refuses the others; this guards a spec built around validation
        raise ValueError(f"hardware.inference_backend={backend!r} has no sampler; allowed: ['levanter', 'vllm']")
    return Sampler(
        model, tokenizer, spec.sampler, spec.model.max_seq_len, version=version, seed=seed,
        kv_on_swap=spec.rollout.kv_on_swap, compute_dtype=resolve_dtype(spec.hardware.compute_dtype), mesh=mesh,
    )
