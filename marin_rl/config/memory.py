"""The memory plan: bytes per device of the trainer mesh and of a rollout worker's sampler, before anything starts.

Trainer, per device of hardware.trainer_mesh (parameter shapes from the Levanter model's named axes, split the way
training/mesh.py's PARAMETER_MAPPING splits them):
    parameters  sum over leaves of numel x bytes(param_dtype) / (product of the mesh axes its named axes map to)
    gradients   the same bytes, twice with gradient accumulation (the running sum + one micro-batch's gradients)
    optimizer   AdamW's two moments: 2 x parameters
    activations t = micro_batch_size / (data x fsdp) x max_seq_len tokens per device, c = bytes(compute_dtype):
                layer(t) = t c (4 E + (H + 2 K) D / m + H S / m + 3 I / m)   [norms/residual/attention output,
                           q/k/v, attention probabilities, SwiGLU gate/up/product; heads and MLP split over model=m]
                with remat (Levanter's gradient_checkpointing): t c E per layer (its saved input) + one layer(t);
                without: L x layer(t); plus the log-prob pass: 2 x t x min(V, logprob_vocab_chunk) x 4 bytes (f32)
Sampler, per device of a rollout worker's hardware.rollout_mesh (inference/mesh_placement.py places the weights
with the same PARAMETER_MAPPING):
    weights     sum over leaves of numel x bytes(sampler dtype) / (product of the mesh axes its named axes map to)
    KV cache    2 (k, v) x L x B / (data x fsdp) x K / model x max_seq_len x D x bytes(sampler dtype),
                B = the sampler's row batch rounded up to a multiple of data x fsdp (rows and kv heads are split)

E hidden, I MLP width, L layers, H heads, K kv heads, D = E / H head size, V vocabulary, S = max_seq_len.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from marin_rl.config.spec import ModelConfig, RunSpec

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a model: every parameter's named axes and sizes, and the layer dimensions."""

    leaves: list[tuple[tuple[str, ...], tuple[int, ...]]]
    hidden: int
    mlp: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    remat: bool
    source: str  # where the shapes came from (printed with the plan)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    mesh: dict[str, int]
    trainer: dict[str, int]  # bytes per trainer device: parameters, gradients, optimizer, activations
    sampler: dict[str, int]  # bytes per device of a rollout worker's mesh: weights, kv_cache
    device_memory_gb: float | None
    micro_rows_per_device: int
    sampler_batch: int
    source: str
    sampler_dtype: str  # hardware.compute_dtype: the sampler's weights and KV cache
    rollout_mesh: dict[str, int]

    @property
    def trainer_total(self) -> int:
        return sum(self.trainer.values())

    @property
    def sampler_total(self) -> int:
        return sum(self.sampler.values())


def model_shape(model_cfg: ModelConfig) -> ModelShape:
    """Parameter shapes without allocating a weight (eqx.filter_eval_shape of the Levanter model): from config.json
    for a local HF folder, else from the model.* fields (hub ids: their vocab from model.vocab_size)."""
    import equinox as eqx
    import haliax as hax

    from marin_rl.models.hf_io import hf_lev_config, hf_vocab_size
    from marin_rl.models.policy import model_template, tiny_lev_config
    from marin_rl.models.tokenizer import load_tokenizer

    if model_cfg.kind == "tiny":
        lev, vocab, source = tiny_lev_config(model_cfg), len(load_tokenizer(model_cfg)), "model.* fields"
    elif model_cfg.hf_path and (Path(model_cfg.hf_path) / "config.json").is_file():
        lev = hf_lev_config(model_cfg.hf_path, model_cfg.max_seq_len)
        vocab, source = hf_vocab_size(model_cfg.hf_path), f"{model_cfg.hf_path}/config.json"
    else:
        if model_cfg.vocab_size is None:
            raise ValueError(
                f"model.vocab_size is needed for the memory plan: model.hf_path={model_cfg.hf_path!r} is not a "
                "local folder with config.json"
            )
        # Levanter's HF configs keep gradient checkpointing on (its default): so does the estimate
        lev = dataclasses.replace(tiny_lev_config(model_cfg), gradient_checkpointing=True)
        vocab, source = model_cfg.vocab_size, "model.* fields (Llama layout, untied embeddings)"
    template = eqx.filter_eval_shape(model_template, lev, vocab)
    named = [x for x in _leaves(template, hax.NamedArray)]
    leaves = [(tuple(a.name for a in x.axes), tuple(a.size for a in x.axes)) for x in named]
    return ModelShape(
        leaves, lev.hidden_dim, lev.intermediate_dim, lev.num_layers, lev.num_heads, lev.num_kv_heads, vocab,
        bool(lev.gradient_checkpointing), source,
    )


def _leaves(tree: Any, kind: type) -> list:
    import jax

    return [x for x in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, kind)) if isinstance(x, kind)]


def split_factor(
    axes: tuple[str, ...], sizes: tuple[int, ...], mesh: dict[str, int], mapping: dict, key: str = "hardware.trainer_mesh"
) -> int:
    """Devices one leaf is split over: the product of the mesh axes its named axes map to (an axis that does
    not divide evenly is an error: Haliax could not place it)."""
    factor = 1
    for name, size in zip(axes, sizes, strict=True):
        target = mapping.get(name)
        if target is None:
            continue
        ways = math.prod(mesh[t] for t in ((target,) if isinstance(target, str) else target))
        if size % ways:
            raise ValueError(
                f"model axis {name!r} of size {size} does not split over {key} {mesh} "
                f"({target}={ways}); choose mesh sizes that divide it"
            )
        factor *= ways
    return factor


def parameter_bytes_per_device(
    shape: ModelShape, mesh: dict[str, int], dtype_bytes: int, key: str = "hardware.trainer_mesh"
) -> int:
    """sum over leaves of numel x dtype bytes / split factor."""
    from marin_rl.training.mesh import PARAMETER_MAPPING

    return sum(
        math.prod(sizes) * dtype_bytes // split_factor(axes, sizes, mesh, PARAMETER_MAPPING, key)
        for axes, sizes in shape.leaves
    )


def activation_bytes(shape: ModelShape, tokens: int, seq_len: int, model_ways: int, c: int, vocab_chunk: int | None) -> int:
    """The module docstring's activation formula for `tokens` tokens on one device."""
    E, I, L, H, K = shape.hidden, shape.mlp, shape.layers, shape.heads, shape.kv_heads  # noqa: E741 (the docstring's names)
    D = E // H
    per_token = 4 * E + (H + 2 * K) * D // model_ways + H * seq_len // model_ways + 3 * I // model_ways
    layer = tokens * c * per_token
    kept = tokens * c * E * L + layer if shape.remat else L * layer
    chunk = shape.vocab if vocab_chunk is None else min(shape.vocab, vocab_chunk)
    return kept + 2 * tokens * chunk * 4


def kv_cache_bytes(shape: ModelShape, batch: int, seq_len: int, c: int, model_ways: int = 1) -> int:
    """2 x L x B x (K / model) x S x D x c: B rows held by one device, its share of the kv heads."""
    kv_heads = shape.kv_heads // model_ways
    return 2 * shape.layers * batch * kv_heads * seq_len * (shape.hidden // shape.heads) * c


def requested_devices(spec: RunSpec, role: str = "trainer") -> int:
    """Accelerators an actor of `role` ("trainer" / "rollout_worker") asks Ray for (num_gpus on gpu, resources.TPU
    on tpu; on cpu the simulated devices its mesh names, runtime/actor_devices.py): the devices it will see, so
    what a -1 mesh axis resolves to."""
    from marin_rl.runtime.actor_devices import fixed_mesh_devices, role_mesh

    hw = spec.hardware
    res = hw.trainer_resources if role == "trainer" else hw.rollout_resources
    cpu = fixed_mesh_devices(role_mesh(hw, role))
    count = {"gpu": res.num_gpus, "tpu": res.resources.get("TPU", 1), "cpu": cpu}[hw.accelerator]
    return max(int(count), 1)


def memory_plan(
    spec: RunSpec, shape: ModelShape | None = None, n_devices: int | None = None, n_rollout_devices: int | None = None
) -> MemoryPlan:
    """The plan of a run; n_devices / n_rollout_devices: devices the trainer / a rollout worker sees (default
    `requested_devices`)."""
    from marin_rl.inference.sampler import DEFAULT_MAX_BATCH
    from marin_rl.training.mesh import resolve_mesh_shape

    shape = model_shape(spec.model) if shape is None else shape
    hw, train = spec.hardware, spec.train
    n_devices = requested_devices(spec) if n_devices is None else n_devices
    mesh = resolve_mesh_shape(hw.trainer_mesh.model_dump(), n_devices)
    p = DTYPE_BYTES[hw.param_dtype]
    c = DTYPE_BYTES[hw.compute_dtype]
    params = parameter_bytes_per_device(shape, mesh, p)
    micro = train.micro_batch_size or train.batch_size
    accumulating = micro < train.batch_size
    rows = micro // (mesh["data"] * mesh["fsdp"])
    S = spec.model.max_seq_len
    # shared prompts (hardware.trainer_shared_prompts): each response's tokens plus one prompt per n responses, each
    # padded up to S; a response attends over its prompt's keys and its own, up to 2 S
    tokens, attended = rows * S, S
    if hw.trainer_shared_prompts:
        tokens, attended = tokens + -(-rows // spec.rollout.n_generations) * S, 2 * S
    trainer = {
        "parameters": params,
        "gradients": params * (2 if accumulating else 1),
        "optimizer": 2 * params,
        "activations": activation_bytes(shape, tokens, attended, mesh["model"], c, spec.model.logprob_vocab_chunk),
    }
    s = DTYPE_BYTES[hw.compute_dtype]
    key = "hardware.rollout_mesh"
    n_rollout = requested_devices(spec, "rollout_worker") if n_rollout_devices is None else n_rollout_devices
    rmesh = resolve_mesh_shape(hw.rollout_mesh.model_dump(), n_rollout, key)
    row_split = rmesh["data"] * rmesh["fsdp"]
    sampler_rows = -(-DEFAULT_MAX_BATCH // row_split)  # the sampler's batch bucket is a multiple of the split
    sampler = {
        "weights": parameter_bytes_per_device(shape, rmesh, s, key),
        "kv_cache": kv_cache_bytes(shape, sampler_rows, S, s, rmesh["model"]),
    }
    return MemoryPlan(
        mesh, trainer, sampler, hw.device_memory_gb, rows, DEFAULT_MAX_BATCH, shape.source, hw.compute_dtype, rmesh
    )


def format_memory_plan(plan: MemoryPlan) -> str:
    """The plan as printed by dry_run (GiB = 2^30 bytes)."""
    budget = "no budget (hardware.device_memory_gb unset)" if plan.device_memory_gb is None else (
        f"budget {plan.device_memory_gb:g} GiB per device (hardware.device_memory_gb)"
    )
    lines = [f"memory plan per device ({budget}; shapes from {plan.source}):"]
    lines.append(f"  trainer mesh {plan.mesh}, {plan.micro_rows_per_device} micro-batch rows per device")
    for name, value in plan.trainer.items():
        lines.append(f"    {name:<12} {value / GIB:9.3f} GiB")
    lines.append(f"    {'total':<12} {plan.trainer_total / GIB:9.3f} GiB")
    lines.append(
        f"  rollout worker mesh {plan.rollout_mesh} (sampler {plan.sampler_dtype}, batch {plan.sampler_batch} rows "
        "split over data x fsdp)"
    )
    for name, value in plan.sampler.items():
        lines.append(f"    {name:<12} {value / GIB:9.3f} GiB")
    lines.append(f"    {'total':<12} {plan.sampler_total / GIB:9.3f} GiB")
    return "\n".join(lines)


def check_memory_plan(plan: MemoryPlan) -> None:
    """Raise ValueError when a device of the plan needs more than hardware.device_memory_gb, naming the knobs."""
    if plan.device_memory_gb is None:
        return
    budget = plan.device_memory_gb * GIB
    problems = []
    if plan.trainer_total > budget:
        t = plan.trainer
        problems.append(
            f"the trainer needs {plan.trainer_total / GIB:.2f} GiB per device: lower train.micro_batch_size "
            f"(activations {t['activations'] / GIB:.2f} GiB), split parameters + gradients + optimizer "
            f"({(t['parameters'] + t['gradients'] + t['optimizer']) / GIB:.2f} GiB) over more devices with "
            f"hardware.trainer_mesh (fsdp/model, now {plan.mesh}), or use hardware.param_dtype=bfloat16 / "
            "hardware.compute_dtype=bfloat16"
        )
    if plan.sampler_total > budget:
        problems.append(
            f"a rollout worker needs {plan.sampler_total / GIB:.2f} GiB (weights "
            f"{plan.sampler['weights'] / GIB:.2f}, KV cache {plan.sampler['kv_cache'] / GIB:.2f}) per device: split "
            f"them over more devices with hardware.rollout_mesh (model/data, now {plan.rollout_mesh}), lower "
            "model.max_seq_len or use a smaller model"
        )
    if problems:
        raise ValueError(
            f"memory plan does not fit hardware.device_memory_gb={plan.device_memory_gb:g}: " + "; ".join(problems)
        )
