"""mode=sft: supervised fine-tuning only (the loop is marin_rl.training.sft) on hardware.trainer_mesh, checkpointed like
an RL run."""

from __future__ import annotations

from pathlib import Path

from marin_rl.config.seeds import derive_seed, jax_key
from marin_rl.config.spec import RunSpec
from marin_rl.training.sft import run_sft, sft_examples, sft_steps


def sft_main(spec: RunSpec, run_dir: Path) -> Path:
    """mode=sft: build env + policy, run SFT, log run_dir/metrics.jsonl, checkpoint under run_dir/checkpoints/."""
    from marin_rl.environments import build_environment
    from marin_rl.inference.mesh_placement import weight_devices
    from marin_rl.models.policy import build_policy
    from marin_rl.training.checkpoint import checkpoint_path, save_checkpoint
    from marin_rl.training.mesh import build_mesh, compute_scope, shard_params

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    steps = sft_steps(spec)
    model, tokenizer, _ = build_policy(
        spec.model, jax_key(spec.seed, "model-init"), dtype=spec.hardware.param_dtype
    )
    env = build_environment(spec.env, seed=spec.seed)
    try:
        examples = sft_examples(spec, env, tokenizer)
    finally:
        env.close()
    metrics_path = run_dir / "metrics.jsonl"
    metrics_path.unlink(missing_ok=True)
    print(
        f"sft: {len(examples)} examples ({spec.sft.source}), {steps} steps x {spec.sft.batch_size}, lr {spec.sft.lr}"
    )
    mesh = build_mesh(spec.hardware.trainer_mesh.model_dump())  # the devices an RL run's trainer would use
    model = shard_params(model, mesh)
    with compute_scope(mesh):
        state, history = run_sft(
            model,
            tokenizer,
            examples,
            steps=steps,
            batch_size=spec.sft.batch_size,
            lr=spec.sft.lr,
            seed=derive_seed(spec.seed, "sft"),
            max_seq_len=spec.model.max_seq_len,
            log_path=metrics_path,
            vocab_chunk=spec.model.logprob_vocab_chunk,
            mesh=mesh,
            return_state=True,
        )
    extra = {
        "sft": {
            "steps": steps,
            "examples": len(examples),
            "source": spec.sft.source,
            "final_loss": history[-1] if history else None,
            "devices": weight_devices(state.model),  # hardware.trainer_mesh at work
        }
    }
    return save_checkpoint(
        checkpoint_path(run_dir / "checkpoints", steps),
        state,
        extra,
        model_config=spec.model,
        keep=spec.train.keep_checkpoints,
    )
