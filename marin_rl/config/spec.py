"""The run spec: one pydantic model of a whole run, built once from the composed Hydra config.

Every config group validates into its own sub-model (`extra="forbid"`, so a misspelt key is an error), and the
cross-field checks that need several groups at once live on `RunSpec`. Errors name the config key, the bad value
and what is allowed, and they are raised before Ray starts or a model loads (see `build_run_spec`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from marin_rl.config.strict import StrictModel
from marin_rl.environments.config import EnvConfig
from marin_rl.objectives.config import LossConfig


class SamplerConfig(StrictModel):
    name: str
    temperature: float = Field(1.0, ge=0.0)
    top_k: int = Field(0, ge=0)  # 0 = no top-k truncation
    top_p: float = Field(1.0, gt=0.0, le=1.0)  # 1.0 = no nucleus truncation
    greedy: bool = False
    max_new_tokens: int = Field(32, gt=0)
    stop: list[str] = []
    decode_chunk: int = Field(16, gt=0)
    eval_temperature: float = Field(1.0, ge=0.0)
    eval_max_new_tokens: int | None = Field(None, gt=0)

    @property
    def is_greedy(self) -> bool:
        """True when training would decode (near-)deterministically: RL needs exploration."""
        return self.greedy or self.temperature < 1e-3 or self.top_k == 1


class ModelConfig(StrictModel):
    name: str
    kind: Literal["tiny", "hf"]
    hf_path: str | None = None  # HF repo id or local directory (kind=hf)
    tokenizer: str | None = None  # defaults to hf_path for kind=hf; the built-in char tokenizer for kind=tiny
    max_seq_len: int = Field(128, gt=0)
    chat_template: bool = False
    hidden_dim: int = Field(64, gt=0)
    intermediate_dim: int = Field(128, gt=0)
    num_layers: int = Field(2, gt=0)
    num_heads: int = Field(4, gt=0)
    num_kv_heads: int = Field(4, gt=0)
    init_checkpoint: str | None = None  # start from a marin-rl checkpoint or HF export directory
    # apply the LM head in vocabulary chunks of this size when computing log-probs (None = whole vocab at once)
    logprob_vocab_chunk: int | None = Field(None, gt=0)
    # vocabulary size for the memory plan when hf_path is a hub id (a local folder's config.json is read instead)
    vocab_size: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _shape_checks(self) -> "ModelConfig":
        if self.kind == "hf" and not self.hf_path:
            raise ValueError("model.hf_path must name an HF repo id or a local directory when model.kind=hf")
        if self.kind == "tiny":
            if self.hidden_dim % self.num_heads:
                raise ValueError(
                    f"model.hidden_dim={self.hidden_dim} must be divisible by model.num_heads={self.num_heads}"
                )
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"model.num_heads={self.num_heads} must be a multiple of model.num_kv_heads={self.num_kv_heads}"
                )
        return self


class OptimizerConfig(StrictModel):
    name: Literal["adamw"] = "adamw"
    lr: float
    weight_decay: float = Field(0.0, ge=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)
    eps: float = Field(1e-8, gt=0.0)
    max_grad_norm: float | None = Field(1.0, gt=0.0)
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _lr_positive(self) -> "OptimizerConfig":
        if not self.lr > 0:
            raise ValueError(f"optimizer.lr={self.lr!r} is not allowed: the learning rate must be > 0")
        return self


class ActorResources(StrictModel):
    """Ray resource request of one actor (https://docs.ray.io/en/latest/ray-core/scheduling/resources.html)."""

    num_cpus: float = Field(1.0, ge=0.0)
    num_gpus: float = Field(0.0, ge=0.0)
    resources: dict[str, float] = {}


class MeshConfig(StrictModel):
    """Sizes of a (data, fsdp, model) device mesh (training/mesh.py); -1 = the devices the other axes leave."""

    data: int = 1  # pure data parallel: parameters replicated, batch split
    fsdp: int = -1  # parameters + optimizer state sharded along "embed", batch split
    model: int = 1  # tensor parallel: attention heads, MLP width, vocabulary split

    @model_validator(mode="after")
    def _sizes(self) -> "MeshConfig":
        sizes = self.model_dump()
        bad = {k: v for k, v in sizes.items() if v == 0 or v < -1}
        if bad:
            raise ValueError(f"mesh axis sizes must be >= 1 or -1 (the rest), got {bad}")
        if list(sizes.values()).count(-1) > 1:
            raise ValueError(f"at most one mesh axis may be -1 (the rest), got {sizes}")
        return self


# head sizes vLLM 0.32 CPU attention accepts (CPUAttentionBackend.get_supported_head_sizes)
VLLM_CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class VllmConfig(StrictModel):
    """The vLLM engine each rollout worker starts when hardware.inference_backend=vllm (inference/vllm_sampler.py)."""

    python: str = ".venv-vllm/bin/python"  # interpreter of the vLLM environment (`make vllm`); relative to the project
    memory_fraction: float = Field(0.1, gt=0.0, le=1.0)  # vLLM gpu_memory_utilization (host memory for the KV cache on the CPU)
    max_num_seqs: int = Field(256, gt=0)  # sequences the engine decodes together


class CompileCacheConfig(StrictModel):
    """JAX's persistent compilation cache, shared by every process of a run (runtime/compile_cache.py)."""

    dir: str | None = ".cache/jax"  # folder of compiled programs, relative to the project; null = compile every time
    max_gb: float = Field(2.0, gt=0.0)  # least recently used programs are deleted beyond this size
    min_compile_s: float = Field(0.0, ge=0.0)  # programs that compiled faster than this are not stored


class HardwareConfig(StrictModel):
    name: str
    accelerator: Literal["cpu", "gpu", "tpu"]
    num_rollout_workers: int = Field(1, ge=1)
    trainer_mesh: MeshConfig = MeshConfig()
    # each rollout worker's sampler mesh (inference/mesh_placement.py); default one device
    rollout_mesh: MeshConfig = MeshConfig(data=1, fsdp=1, model=1)
    device_memory_gb: float | None = Field(None, gt=0.0)  # per accelerator, GiB; the memory plan must fit (None: no check)
    trainer_resources: ActorResources = ActorResources()
    rollout_resources: ActorResources = ActorResources()
    inference_backend: Literal["levanter", "vllm", "tpu_inference"] = "levanter"
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    param_dtype: Literal["float32", "bfloat16"] = "float32"
    # trainer forward/backward: Llama layers as straight-line code instead of Levanter's layer scan
    trainer_unroll_layers: bool = False
    # trainer forward/backward: each prompt once, followed by all its responses (training/shared_prompts.py)
    trainer_shared_prompts: bool = False
    # JAX processes (trainer actors) the trainer mesh spans, each holding an equal share of its devices
    trainer_processes: int = Field(1, ge=1)
    # every Ray actor starts with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (runtime/allocator.py)
    malloc_hugepages: bool = True
    # a relaunch (resume, sweep trial, next test) loads the programs an earlier run compiled
    compile_cache: CompileCacheConfig = CompileCacheConfig()

    vllm: VllmConfig = VllmConfig()  # read only when inference_backend=vllm

    @model_validator(mode="after")
    def _backend_fits_accelerator(self) -> "HardwareConfig":
        if self.inference_backend == "tpu_inference":
            raise ValueError(
                "hardware.inference_backend='tpu_inference' cannot run from this project's environment: "
                "tpu-inference needs Python >= 3.12 and jax 0.11 (Levanter 1.2.dev1644 pins Python 3.11, jax 0.10) "
                "and a TPU; allowed: ['levanter', 'vllm']"
            )
        fixed = [size for size in self.trainer_mesh.model_dump().values() if size != -1]
        if self.trainer_processes > 1 and math.prod(fixed) % self.trainer_processes:
            raise ValueError(
                f"hardware.trainer_processes={self.trainer_processes} must divide the devices of "
                f"hardware.trainer_mesh={self.trainer_mesh.model_dump()} ({math.prod(fixed)} fixed): every trainer "
                "process holds an equal share"
            )
        hosts = {"levanter": {"cpu", "gpu", "tpu"}, "vllm": {"cpu", "gpu"}}
        if self.accelerator not in hosts[self.inference_backend]:
            allowed = sorted(b for b, accs in hosts.items() if self.accelerator in accs)
            raise ValueError(
                f"hardware.inference_backend={self.inference_backend!r} cannot run on "
                f"hardware.accelerator={self.accelerator!r}; allowed here: {allowed}"
            )
        return self


class TrainConfig(StrictModel):
    batch_size: int = Field(..., gt=0)  # responses (prompts x generations) per optimizer step
    micro_batch_size: int | None = Field(None, gt=0)  # gradient accumulation chunk; None = whole batch
    steps: int = Field(..., ge=0)
    checkpoint_every: int = Field(0, ge=0)  # 0 = only at the end
    keep_checkpoints: int = Field(2, ge=1)
    eval_every: int = Field(0, ge=0)  # 0 = only before and after RL
    eval_prompts: int = Field(200, ge=1)
    eval_samples: int = Field(1, ge=1)  # samples per eval prompt (pass@k uses k <= eval_samples)
    log_every: int = Field(1, ge=1)
    # padded sequence lengths per doubling (training/batch.py length_bucket): more = less padding, more compiles
    length_buckets_per_octave: Literal[1, 2, 4, 8] = 2


class WeightSyncConfig(StrictModel):
    # auto: shared_memory where every actor shares the driver's node and the slots fit in /dev/shm, else object_store
    # (the driver chooses before any actor starts: runtime/driver.py weight_channel)
    method: Literal["auto", "object_store", "files", "shared_memory"] = "auto"
    timeout_s: float = Field(120.0, gt=0.0)
    dir: str | None = None  # shared storage for method=files; default <run_dir>/weights

    @model_validator(mode="after")
    def _dir_only_for_files(self) -> "WeightSyncConfig":
        if self.dir is not None and self.method != "files":
            raise ValueError(
                f"rollout.weight_sync.dir={self.dir!r} is read only by method=files (method={self.method}); "
                "allowed: dir=null, or method=files"
            )
        return self


class ReplayConfig(StrictModel):
    capacity: int = Field(4096, gt=0)  # groups held at most
    max_reuse: int = Field(1, ge=1)  # times one rollout may enter a training batch


class RolloutConfig(StrictModel):
    mode: Literal["sync", "inflight", "one_step_off"] = "sync"
    kv_on_swap: Literal["recompute", "keep"] = "recompute"  # what an in-flight weight swap does to the KV cache
    n_generations: int = Field(8, ge=1)  # responses per prompt (the GRPO group)
    max_staleness: int = Field(1, ge=0)  # trainer steps a rollout's oldest token may lag
    weight_sync: WeightSyncConfig = WeightSyncConfig()
    replay: ReplayConfig = ReplayConfig()
    watchdog_timeout_s: float = Field(300.0, gt=0.0)


class SftConfig(StrictModel):
    warmstart: bool = False  # run SFT before RL (mode=rl)
    steps: int = Field(0, ge=0)
    batch_size: int = Field(32, gt=0)
    lr: float = Field(3e-3, gt=0.0)
    source: str = "env"  # "env" = reference answers of the env, or a path to a synthetic-data JSONL


class GenerateConfig(StrictModel):
    num_prompts: int = Field(64, gt=0)
    n: int = Field(4, gt=0)
    keep: Literal["all", "correct", "mixed"] = "all"
    split: Literal["train", "eval"] = "train"
    out: str | None = None  # default <run_dir>/synthetic.jsonl


class TrackingConfig(StrictModel):
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    project: str = "marin-rl"
    entity: str | None = None
    plots: bool = True
    progress: bool = True


class RayConfig(StrictModel):
    address: str | None = None  # None = start a local Ray; "auto" = join the cluster of this machine
    include_dashboard: bool = False
    num_cpus: int | None = Field(None, ge=1)
    namespace: str | None = None  # None = a fresh namespace per run


class RunSpec(StrictModel):
    mode: Literal["rl", "sft", "generate", "eval"] = "rl"
    seed: int = 0
    dry_run: bool = False
    resume: str = "never"  # never | auto | <path to a run folder>
    overwrite: bool = False  # fresh start in a run folder that holds a previous run: delete its contents first
    run_name: str | None = None
    recipe: str | None = None
    env: EnvConfig
    loss: LossConfig
    sampler: SamplerConfig
    model: ModelConfig
    optimizer: OptimizerConfig
    hardware: HardwareConfig
    train: TrainConfig
    rollout: RolloutConfig
    sft: SftConfig = SftConfig()
    generate: GenerateConfig = GenerateConfig()
    tracking: TrackingConfig = TrackingConfig()
    ray: RayConfig = RayConfig()

    @model_validator(mode="after")
    def _cross_field_checks(self) -> "RunSpec":
        g = self.rollout.n_generations
        if self.train.batch_size % g:
            lo, hi = (self.train.batch_size // g) * g, (self.train.batch_size // g + 1) * g
            allowed = f"{lo} or {hi}" if lo else f"{hi}"
            raise ValueError(
                f"train.batch_size={self.train.batch_size} must be a multiple of rollout.n_generations={g} "
                f"(whole groups per step); nearest allowed: {allowed}"
            )
        mb = self.train.micro_batch_size
        if mb is not None and self.train.batch_size % mb:
            raise ValueError(
                f"train.micro_batch_size={mb} must divide train.batch_size={self.train.batch_size}"
            )
        if self.loss.clip_eps_high < self.loss.clip_eps_low and self.loss.ratio_level == "token":
            raise ValueError(
                f"loss.clip_eps_high={self.loss.clip_eps_high} is below loss.clip_eps_low={self.loss.clip_eps_low}; "
                "clip-higher (DAPO) needs eps_high >= eps_low"
            )
        if self.loss.clip_eps_high > 10.0:
            raise ValueError(f"loss.clip_eps_high={self.loss.clip_eps_high} is out of range (0, 10]")
        if self.sampler.max_new_tokens >= self.model.max_seq_len:
            raise ValueError(
                f"sampler.max_new_tokens={self.sampler.max_new_tokens} does not fit the model context "
                f"model.max_seq_len={self.model.max_seq_len}; it must leave room for the prompt"
            )
        if self.loss.overlong.penalty and self.loss.overlong.buffer_len > self.sampler.max_new_tokens:
            raise ValueError(
                f"loss.overlong.buffer_len={self.loss.overlong.buffer_len} exceeds "
                f"sampler.max_new_tokens={self.sampler.max_new_tokens}; the penalty ramp must fit in the response"
            )
        reuse_reason = {"sync": "a group is stale one step after it was sampled",
                        "one_step_off": "each step trains on exactly the groups sampled for it"}
        if self.rollout.mode in reuse_reason and self.rollout.replay.max_reuse > 1:
            raise ValueError(
                f"rollout.replay.max_reuse={self.rollout.replay.max_reuse} does nothing in "
                f"rollout.mode={self.rollout.mode}: {reuse_reason[self.rollout.mode]}; allowed: max_reuse=1, or "
                "rollout.mode=inflight"
            )
        if self.rollout.mode == "one_step_off" and self.rollout.max_staleness < 1:
            raise ValueError(
                f"rollout.max_staleness={self.rollout.max_staleness} would drop every batch of rollout.mode=one_step_off "
                "(from step 2 on each is sampled one step behind the trainer); allowed: max_staleness >= 1, or "
                "rollout.mode=sync"
            )
        if self.hardware.trainer_processes > 1 and self.mode != "rl":
            raise ValueError(
                f"mode={self.mode} runs in the launching process alone; hardware.trainer_processes="
                f"{self.hardware.trainer_processes} applies to mode=rl only; allowed: trainer_processes=1"
            )
        if self.hardware.trainer_processes > 1 and self.sft.warmstart and self.sft.steps > 0:
            raise ValueError(
                f"sft.warmstart with hardware.trainer_processes={self.hardware.trainer_processes}: the SFT warm-start "
                "(training/sft.py) has never run across trainer processes; allowed: sft.warmstart=false (or sft.steps=0), or trainer_processes=1"
            )
        self._check_shared_prompts()
        groups = self.train.batch_size // g
        if groups < self.hardware.num_rollout_workers:
            raise ValueError(
                f"train.batch_size={self.train.batch_size} / rollout.n_generations={g} = {groups} prompts per step "
                f"cannot be shared by hardware.num_rollout_workers={self.hardware.num_rollout_workers}: every "
                f"worker samples at least one prompt a step; allowed: num_rollout_workers <= {groups}"
            )
        if self.rollout.weight_sync.method == "shared_memory" and self.ray.address:
            raise ValueError(
                f"rollout.weight_sync.method=shared_memory needs every actor on one node, and ray.address="
                f"{self.ray.address!r} joins a cluster whose workers may sit on other nodes; allowed: method="
                "object_store or files, or ray.address=null (a private local Ray)"
            )
        if self.resume not in ("never", "auto") and not self.resume:
            raise ValueError("resume must be 'never', 'auto' or a path to a run folder")
        if self.overwrite and self.resume == "auto":
            raise ValueError(
                "overwrite=true deletes the run folder that resume=auto would continue; set only one of them"
            )
        if self.rollout.kv_on_swap != "recompute" and self.rollout.mode != "inflight":
            raise ValueError(
                f"rollout.kv_on_swap={self.rollout.kv_on_swap!r} acts only when weights swap mid-generation; "
                f"allowed with rollout.mode={self.rollout.mode}: recompute (the default)"
            )
        if self.hardware.inference_backend == "vllm":
            self._check_vllm_model()
            mesh = self.hardware.rollout_mesh
            if (mesh.data, mesh.fsdp, mesh.model) != (1, 1, 1):
                raise ValueError(
                    f"hardware.rollout_mesh={mesh.model_dump()} places the Levanter sampler; a vLLM engine runs on one "
                    "device here (tensor parallelism is not wired); allowed with inference_backend=vllm: "
                    "{data: 1, fsdp: 1, model: 1}"
                )
        return self

    def _check_shared_prompts(self) -> None:
        """hardware.trainer_shared_prompts needs one pass per step, the unrolled layers and an attention kernel that
        takes an explicit mask."""
        if not self.hardware.trainer_shared_prompts:
            return
        mb = self.train.micro_batch_size
        if mb is not None and mb != self.train.batch_size:
            raise ValueError(
                f"hardware.trainer_shared_prompts=true runs a step's rows in one pass and train.micro_batch_size={mb} "
                "splits them; allowed: trainer_shared_prompts=false, or train.micro_batch_size=null"
            )
        if not self.hardware.trainer_unroll_layers:
            raise ValueError(
                "hardware.trainer_shared_prompts=true runs the unrolled Llama layers; allowed: "
                "trainer_unroll_layers=true, or trainer_shared_prompts=false"
            )
        if self.hardware.accelerator == "tpu":
            raise ValueError(
                "hardware.trainer_shared_prompts=true needs an attention mask per response, which Levanter's TPU "
                "(splash) attention does not take; allowed on hardware.accelerator=tpu: false"
            )

    def _check_vllm_model(self) -> None:
        """vLLM's CPU attention serves a fixed set of head sizes (today's tiny default, 16, is not one of them)."""
        if self.model.kind != "tiny" or self.hardware.accelerator != "cpu":
            return
        head_dim = self.model.hidden_dim // self.model.num_heads
        if head_dim not in VLLM_CPU_HEAD_DIMS:
            raise ValueError(
                f"hardware.inference_backend=vllm on the CPU needs a head size in {list(VLLM_CPU_HEAD_DIMS)}; "
                f"model.hidden_dim={self.model.hidden_dim} / model.num_heads={self.model.num_heads} = {head_dim} "
                "(e.g. model.num_heads=2 model.num_kv_heads=2 for hidden_dim 64)"
            )


class SpecError(ValueError):
    """A config that cannot run: the message names the key, the value and what is allowed."""


def _format_validation_error(err: ValidationError, cfg: dict[str, Any]) -> str:
    lines = ["invalid run config:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            parent = ".".join(str(p) for p in e["loc"][:-1])
            lines.append(f"  - unknown key '{loc}'" + (f" (not a field of '{parent}')" if parent else ""))
            continue
        value = e.get("input")
        shown = "" if isinstance(value, dict) or value is None else f" (got {value!r})"
        if loc:
            lines.append(f"  - {loc}: {msg}{shown}")
        else:
            lines.append(f"  - {msg}")
    return "\n".join(lines)


def build_run_spec(cfg: dict[str, Any]) -> RunSpec:
    """Validate a composed config (a plain dict, interpolations resolved) into a RunSpec or raise SpecError."""
    cfg = {k: v for k, v in cfg.items() if k != "hydra"}
    try:
        return RunSpec.model_validate(cfg)
    except ValidationError as err:
        raise SpecError(_format_validation_error(err, cfg)) from None
