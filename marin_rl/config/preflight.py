"""Checks the driver runs before any Ray actor starts: data files, resume paths, checkpoint vs model shapes.

Each would otherwise surface ~30 s later inside a Ray traceback. A failed check raises PreflightError with one
message that names the config key, the file and what to change.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path

from marin_rl.config.spec import ModelConfig, RunSpec

# ModelConfig fields that decide the parameter shapes of a kind=tiny model (max_seq_len does not: no learned
# position table), in the order a message lists them.
TINY_SHAPE_FIELDS = ("hidden_dim", "intermediate_dim", "num_layers", "num_heads", "num_kv_heads", "tokenizer")
# config.json keys that decide the parameter shapes of an HF model.
HF_SHAPE_KEYS = (
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "model_type",
)


class PreflightError(ValueError):
    """A run that cannot work, found before Ray starts; the message says what to change."""


def check_data(spec: RunSpec) -> None:
    """Load every local data file the run will read (env components, sft.source) so a bad line fails now."""
    from marin_rl.environments import build_component, resolve_data_dir
    from marin_rl.environments.grading import LazyGradingPool

    pool = LazyGradingPool(spec.env.grading)  # started on first grade only: never here
    for index, component in enumerate(spec.env.components):
        if component.kind == "mock":
            continue
        if component.kind != "classification" and resolve_data_dir(
            component.data_dir, spec.env.data_dir, component.kind
        ) is None:
            continue  # the hub: its loader already fails fast and clearly, and a download belongs to the run
        try:
            build_component(component, spec.env.data_dir, pool, seed=spec.seed).close()
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise PreflightError(f"env.components.{index} ({component.resolved_name}): {err}") from None
    if spec.sft.source != "env" and (spec.mode == "sft" or (spec.sft.warmstart and spec.sft.steps > 0)):
        from marin_rl.environments.synthetic import load_sft_jsonl

        try:
            load_sft_jsonl(spec.sft.source)
        except (OSError, ValueError) as err:
            raise PreflightError(f"sft.source={spec.sft.source}: {err}") from None


def shape_differences(config: ModelConfig, saved: ModelConfig) -> list[str]:
    """'field: here vs checkpoint' for every model setting that changes parameter shapes; [] = compatible."""
    if config.kind != saved.kind:
        return [f"model.kind={config.kind} here, {saved.kind} in the checkpoint"]
    if config.kind == "tiny":
        return [
            f"model.{name}={getattr(config, name)} here, {getattr(saved, name)} in the checkpoint"
            for name in TINY_SHAPE_FIELDS
            if getattr(config, name) != getattr(saved, name)
        ]
    here, there = _hf_shape(config.hf_path), _hf_shape(saved.hf_path)
    if here is None or there is None:
        return []  # a hub id or a moved folder: nothing local to compare; the restore itself still checks
    return [f"{key}={here.get(key)} here ({config.hf_path}), {there.get(key)} in the checkpoint ({saved.hf_path})"
            for key in HF_SHAPE_KEYS if here.get(key) != there.get(key)]


def _hf_shape(hf_path: str | None) -> dict | None:
    """The shape-deciding keys of a local HF folder's config.json, or None when it is not local."""
    import json

    file = Path(hf_path or "") / "config.json"
    if not hf_path or not file.is_file():
        return None
    cfg = json.loads(file.read_text())
    return {key: cfg.get(key) for key in HF_SHAPE_KEYS}


def check_checkpoint_fits(path: Path, config: ModelConfig, what: str) -> None:
    """Raise PreflightError when checkpoint `path` was saved from a model of other shapes than `config`."""
    from marin_rl.training.checkpoint import MODEL_CONFIG_FILE, read_model_config

    if not (path / MODEL_CONFIG_FILE).is_file():
        return  # saved without its model config: the restore compares the arrays themselves
    differences = shape_differences(config, read_model_config(path))
    if differences:
        raise PreflightError(
            f"{what}: the model config differs from the checkpoint's ({path / MODEL_CONFIG_FILE}), so its weights "
            f"do not fit: {'; '.join(differences)}. Set the model to the checkpoint's values or start without it."
        )


def resume_checkpoint(spec: RunSpec, run_dir: Path) -> Path | None:
    """The checkpoint mode=rl will resume from (None: a fresh start), printing any fallback past damaged ones."""
    from marin_rl.training.checkpoint import list_checkpoints
    from marin_rl.training.checkpoint_manifest import fallback_message, newest_verified

    if spec.resume == "never":
        return None
    if spec.resume == "auto":
        where, key = run_dir / "checkpoints", "resume=auto"
    else:
        folder = Path(spec.resume)
        if not folder.is_dir():
            raise PreflightError(f"resume={spec.resume}: no such run folder")
        where, key = folder / "checkpoints", f"resume={spec.resume}"
    found = list_checkpoints(where)
    if not found:
        if spec.resume == "auto":
            return None  # nothing to continue yet: a fresh start, as documented
        raise PreflightError(f"{key}: no finished checkpoint under {where}")
    chosen, rejected = newest_verified(found)
    if chosen is None:
        raise PreflightError(
            f"{key}: none of the {len(found)} checkpoints under {where} verifies, so nothing can be resumed:\n"
            f"{fallback_message(chosen, rejected)}\nRestore the files, or start over with overwrite=true."
        )
    if rejected:
        print(f"{key}: {fallback_message(chosen, rejected)}", flush=True)
    check_checkpoint_fits(chosen, spec.model, key)
    return chosen


def check_init_checkpoint(spec: RunSpec) -> None:
    """model.init_checkpoint must exist; a marin-rl checkpoint there must verify and fit the model."""
    from marin_rl.training.checkpoint import is_checkpoint
    from marin_rl.training.checkpoint_manifest import manifest_problems, summarize

    if not spec.model.init_checkpoint:
        return
    path = Path(spec.model.init_checkpoint)
    key = f"model.init_checkpoint={path}"
    if not path.exists():
        raise PreflightError(f"{key}: no such folder")
    if is_checkpoint(path):
        problems = manifest_problems(path)
        if problems:
            raise PreflightError(f"{key}: the checkpoint is damaged: {summarize(problems)}")
        check_checkpoint_fits(path, spec.model, key)


def check_inference_backend(spec: RunSpec) -> None:
    """hardware.inference_backend=vllm: the vLLM environment exists and holds the pinned versions."""
    if spec.hardware.inference_backend != "vllm" or spec.mode == "sft":
        return
    from marin_rl.inference.vllm_env import VllmEnvironmentError, check_vllm_environment, vllm_python

    try:
        check_vllm_environment(vllm_python(spec.hardware.vllm))
    except VllmEnvironmentError as err:
        raise PreflightError(f"hardware.inference_backend=vllm: {err}") from None


def slot_bytes(spec: RunSpec) -> int:
    """Bytes of one slot of the shared-memory weight channel: its header, then every weight in hardware.param_dtype,
    each SHM_ALIGN-aligned (weight_sync.slot_layout)."""
    from marin_rl.config.memory import DTYPE_BYTES, model_shape
    from marin_rl.runtime.weight_sync import SHM_PAYLOAD_START, aligned

    itemsize = DTYPE_BYTES[spec.hardware.param_dtype]
    return SHM_PAYLOAD_START + sum(aligned(math.prod(sizes) * itemsize) for _, sizes in model_shape(spec.model).leaves)


def weight_slot_bytes(spec: RunSpec) -> int:
    """Bytes the shared-memory weight channel's ring takes: SHM_SLOTS slots."""
    from marin_rl.runtime.weight_sync import SHM_SLOTS

    return SHM_SLOTS * slot_bytes(spec)


def check_weight_slots(spec: RunSpec) -> None:
    """rollout.weight_sync.method=shared_memory: /dev/shm exists and has room for the slot ring (a tmpfs that runs
    out of room mid-write kills the writer with SIGBUS; here it is a message before anything starts)."""
    if spec.mode != "rl" or spec.rollout.weight_sync.method != "shared_memory":
        return
    from marin_rl.runtime.weight_sync import SHM_ROOT, SHM_SLOTS

    if not SHM_ROOT.is_dir():
        raise PreflightError(
            f"rollout.weight_sync.method=shared_memory: this machine has no {SHM_ROOT}; allowed: object_store, files"
        )
    need, free = weight_slot_bytes(spec), shutil.disk_usage(SHM_ROOT).free
    if need > free:
        raise PreflightError(
            f"rollout.weight_sync.method=shared_memory: {SHM_SLOTS} copies of the weights need {need / 2**20:,.0f} "
            f"MiB in {SHM_ROOT}, which has {free / 2**20:,.0f} MiB free; allowed: object_store, files (or a larger "
            f"{SHM_ROOT})"
        )


def weight_sync_method(spec: RunSpec, alive_nodes: int) -> tuple[str, str]:
    """(method, why) for rollout.weight_sync.method=auto: shared_memory when every actor shares this node (no
    ray.address, a one-node Ray) and /dev/shm has room for the slot ring, else object_store. A method set by name is
    kept as it is."""
    method = spec.rollout.weight_sync.method
    if method != "auto":
        return method, "set by rollout.weight_sync.method"
    from marin_rl.runtime.weight_sync import SHM_ROOT

    if spec.ray.address:
        return "object_store", f"ray.address={spec.ray.address!r}: workers may sit on other nodes"
    if alive_nodes > 1:
        return "object_store", f"this Ray has {alive_nodes} nodes"
    if not SHM_ROOT.is_dir():
        return "object_store", f"this machine has no {SHM_ROOT}"
    need, free = weight_slot_bytes(spec), shutil.disk_usage(SHM_ROOT).free
    if need > free:
        return "object_store", f"the slot ring needs {need / 2**20:,.0f} MiB and {SHM_ROOT} has {free / 2**20:,.0f} free"
    return "shared_memory", f"one node, {need / 2**20:,.1f} MiB of {SHM_ROOT} for the slot ring"


def check_shared_prompts_model(spec: RunSpec) -> None:
    """hardware.trainer_shared_prompts runs Levanter's Llama layers one by one (training/logprobs.py unrollable):
    an HF model of another architecture (Qwen2, ...) is refused here, not at the trainer's first step."""
    if spec.mode != "rl" or not spec.hardware.trainer_shared_prompts or spec.model.kind != "hf":
        return
    from transformers import AutoConfig

    model_type = AutoConfig.from_pretrained(spec.model.hf_path).model_type
    if model_type != "llama":
        raise PreflightError(
            f"hardware.trainer_shared_prompts=true runs Llama layers; model.hf_path={spec.model.hf_path} is a "
            f"{model_type!r} model; allowed: hardware.trainer_shared_prompts=false, or a Llama model"
        )


def check_local_cpus(spec: RunSpec) -> None:
    """The run's actors must fit the private local Ray it starts (no ray.address): no node can ever join that one,
    so a run asking for more CPUs than it gives Ray would wait for its placement group forever."""
    ray = sys.modules.get("ray")
    if spec.mode != "rl" or spec.ray.address or (ray is not None and ray.is_initialized()):
        return  # a cluster (or a sweep's Ray) can grow or free CPUs later: the driver waits and says why
    hw = spec.hardware
    trainer_cpus = hw.trainer_processes * hw.trainer_resources.num_cpus
    worker_cpus = hw.num_rollout_workers * hw.rollout_resources.num_cpus
    cpus = spec.ray.num_cpus or os.cpu_count() or 1
    if trainer_cpus + worker_cpus > cpus:
        raise PreflightError(
            f"the run's actors ask for {trainer_cpus + worker_cpus:g} CPUs (hardware.trainer_processes="
            f"{hw.trainer_processes} x hardware.trainer_resources.num_cpus={hw.trainer_resources.num_cpus:g} + "
            f"hardware.num_rollout_workers={hw.num_rollout_workers} x hardware.rollout_resources.num_cpus="
            f"{hw.rollout_resources.num_cpus:g}) but the local Ray this run starts has {cpus} (ray.num_cpus="
            f"{spec.ray.num_cpus}, this machine: {os.cpu_count()}): lower them (a fraction such as "
            "hardware.rollout_resources.num_cpus=0.5 is allowed), raise ray.num_cpus, or join a cluster with "
            "ray.address"
        )


def preflight(spec: RunSpec, run_dir: Path) -> None:
    """Every driver-side check of a run that is about to start (raises PreflightError)."""
    check_local_cpus(spec)
    check_inference_backend(spec)
    check_shared_prompts_model(spec)
    check_weight_slots(spec)
    check_data(spec)
    check_init_checkpoint(spec)
    if spec.mode == "rl":
        resume_checkpoint(spec, run_dir)
