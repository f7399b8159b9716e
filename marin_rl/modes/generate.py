"""mode=generate: sample n responses per prompt with a policy, grade them, keep what the config asks, write JSONL."""

from __future__ import annotations

from pathlib import Path

from marin_rl.config.seeds import derive_seed, jax_key, numpy_rng
from marin_rl.config.spec import RunSpec
from marin_rl.environments import build_environment
from marin_rl.environments.synthetic import Sample, generate_synthetic
from marin_rl.inference.backends import build_sampler
from marin_rl.inference.mesh_placement import rollout_mesh
from marin_rl.inference.prompts import encode_prompt, fit_prompt, prompt_style
from marin_rl.models.policy import build_policy


def make_sample_fn(sampler, tokenizer, spec: RunSpec):
    """A `synthetic.SampleFn` over the run's sampler: rendered prompts in, decoded samples with token counts out."""
    budget = spec.model.max_seq_len - spec.sampler.max_new_tokens

    def sample_fn(prompts, n: int):
        token_prompts = [fit_prompt(encode_prompt(p, tokenizer), budget) for p in prompts]
        completions = sampler.generate(token_prompts, n)
        return [
            [
                Sample(tokenizer.decode(c.tokens, skip_special_tokens=True), len(tp), len(c.tokens),
                       c.finish_reason == "length")
                for c in row
            ]
            for tp, row in zip(token_prompts, completions)
        ]

    return sample_fn


def generate_main(spec: RunSpec, run_dir: Path) -> Path:
    g = spec.generate
    model, tokenizer, _ = build_policy(spec.model, jax_key(spec.seed, "model-init"))
    env = build_environment(spec.env, seed=spec.seed)
    sampler = build_sampler(
        spec, model, tokenizer, version=0, seed=derive_seed(spec.seed, "generate"), workdir=Path(run_dir) / "engine",
        mesh=rollout_mesh(spec.hardware),
    )
    if g.split == "train":
        problems = env.sample(g.num_prompts, numpy_rng(spec.seed, "generate-data"))
    else:
        problems = env.eval_problems(g.num_prompts)
    out = Path(g.out) if g.out else Path(run_dir) / "synthetic.jsonl"
    try:
        stats = generate_synthetic(
            env, problems, make_sample_fn(sampler, tokenizer, spec), g.n, out, keep=g.keep,
            style=prompt_style(spec.model.chat_template),
        )
    finally:
        sampler.close()
    print(
        f"generated {stats['n_samples']} responses for {stats['n_problems']} prompts "
        f"({stats['mean_correct']:.1%} correct); kept {stats['n_written']} ({g.keep}) -> {out}",
        flush=True,
    )
    return out
