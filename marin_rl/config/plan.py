"""The actor plan: which Ray actors a run starts, how many, with what resources and backends (no Ray needed)."""

from __future__ import annotations

from dataclasses import dataclass

from marin_rl.config.spec import ActorResources, RunSpec


@dataclass(frozen=True)
class ActorGroup:
    role: str
    count: int
    resources: ActorResources
    detail: str


def actor_plan(spec: RunSpec) -> list[ActorGroup]:
    hw = spec.hardware
    if spec.mode != "rl":
        return [ActorGroup(spec.mode, 1, hw.trainer_resources, "single process, no Ray actors")]
    sync = spec.rollout.weight_sync
    return [
        ActorGroup("coordinator", 1, ActorResources(num_cpus=0), "run state, weight versions, stop/stall flags"),
        ActorGroup(
            "trainer",
            hw.trainer_processes,  # one actor per JAX process of the trainer (runtime/trainer_group.py)
            hw.trainer_resources,
            f"{spec.model.name} on a {hw.accelerator} mesh {hw.trainer_mesh.model_dump()}, "
            f"{spec.optimizer.name} lr={spec.optimizer.lr}, batch {spec.train.batch_size} "
            f"({spec.train.batch_size // spec.rollout.n_generations} prompts x {spec.rollout.n_generations}), "
            f"loss={spec.loss.name} ({spec.loss.aggregation})",
        ),
        ActorGroup(
            "rollout_worker",
            hw.num_rollout_workers,
            hw.rollout_resources,
            f"sampler={hw.inference_backend} on a mesh {hw.rollout_mesh.model_dump()} T={spec.sampler.temperature} "
            "max_new_tokens="
            f"{spec.sampler.max_new_tokens}, env={spec.env.name}, mode={spec.rollout.mode} "
            f"(max_staleness={spec.rollout.max_staleness})",
        ),
        ActorGroup(
            "weight_sync",
            0,
            ActorResources(num_cpus=0),
            f"method={sync.method}{' (shared_memory on one node, else object_store)' if sync.method == 'auto' else ''} "
            f"timeout={sync.timeout_s}s, checksummed, versioned",
        ),
    ]


def format_plan(groups: list[ActorGroup]) -> str:
    lines = ["actor plan:"]
    for g in groups:
        res = f"cpu={g.resources.num_cpus:g} gpu={g.resources.num_gpus:g}"
        if g.resources.resources:
            res += " " + " ".join(f"{k}={v:g}" for k, v in g.resources.resources.items())
        count = f"x{g.count}" if g.count else "(channel)"
        lines.append(f"  {g.role:<15} {count:<9} [{res}]  {g.detail}")
    return "\n".join(lines)
