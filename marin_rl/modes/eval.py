"""mode=eval: sample the held-out set with the configured policy in this process (no Ray), on
hardware.rollout_mesh, and summarize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marin_rl.config.seeds import derive_seed, jax_key
from marin_rl.config.spec import RunSpec
from marin_rl.runlog.writer import write_summary


def eval_main(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """mode=eval: sample the held-out set with the configured policy in this process (no Ray) and summarize."""

    from marin_rl.environments import build_environment
    from marin_rl.inference.backends import build_sampler
    from marin_rl.inference.graded_sampling import eval_records, sample_and_score
    from marin_rl.inference.mesh_placement import rollout_mesh
    from marin_rl.models.policy import build_policy
    from marin_rl.runlog.eval_summary import summarize_eval
    from marin_rl.runtime.compile_cache import count_programs

    programs = count_programs()  # before the first compile: the summary reports this process's programs
    model, tokenizer, _ = build_policy(spec.model, jax_key(spec.seed, "model-init"))
    env = build_environment(spec.env, seed=spec.seed)
    sampler = build_sampler(
        spec, model, tokenizer, version=0, seed=derive_seed(spec.seed, "eval", 0), workdir=Path(run_dir) / "engine",
        mesh=rollout_mesh(spec.hardware),
    )
    problems = env.eval_problems(spec.train.eval_prompts)
    devices = sampler.weight_devices  # hardware.rollout_mesh at work, recorded in the summary
    try:
        samples = sample_and_score(
            sampler, env, problems, tokenizer, spec.model, spec.train.eval_samples,
            temperature=spec.sampler.eval_temperature, max_new_tokens=spec.sampler.eval_max_new_tokens,
        )
    finally:
        sampler.close()
    summary = {
        "status": "completed", "eval": summarize_eval(eval_records(samples)), "sampler_devices": devices,
        "programs": programs.stats(),  # XLA programs compiled / loaded from hardware.compile_cache
    }
    write_summary(run_dir, summary)
    print(f"eval pass@1 = {summary['eval']['pass_at_1']:.3f} on {len(problems)} prompts ({devices} devices)", flush=True)
    return summary
