"""Prompt rendering, sampling and grading shared by rollout workers, evaluation and synthetic-data generation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from marin_rl.config.spec import ModelConfig
from marin_rl.environments.base import Environment, Problem, Score
from marin_rl.inference.prompts import encode_prompt, fit_prompt, prompt_style
from marin_rl.rollouts import Rollout


def render_prompt_tokens(env: Environment, problems: list[Problem], tokenizer: Any, model_cfg: ModelConfig) -> list[list[int]]:
    """Token ids of each problem's prompt: plain text for the tiny model, the chat template for instruct models."""
    style = prompt_style(model_cfg.chat_template)
    return [encode_prompt(env.render(p, style), tokenizer) for p in problems]


@dataclass(frozen=True)
class ScoredSample:
    problem: Problem
    prompt_tokens: list[int]
    completion: Any  # marin_rl.inference.sampler.Completion
    text: str
    score: Score


def sample_and_score(
    sampler: Any,
    env: Environment,
    problems: list[Problem],
    tokenizer: Any,
    model_cfg: ModelConfig,
    n: int,
    *,
    temperature: float | None = None,
    max_new_tokens: int | None = None,
    on_chunk=None,
) -> list[list[ScoredSample]]:
    """n samples per problem, decoded and graded by the env; [problem][sample].

    A prompt longer than the context leaves room for is cut from the left (its end holds the instruction).
    """
    budget = model_cfg.max_seq_len - (max_new_tokens or sampler.cfg.max_new_tokens)
    prompts = [fit_prompt(p, budget) for p in render_prompt_tokens(env, problems, tokenizer, model_cfg)]
    completions = sampler.generate(
        prompts, n, temperature=temperature, max_new_tokens=max_new_tokens, on_chunk=on_chunk
    )
    flat_problems, flat_texts, flat_trunc = [], [], []
    for problem, comps in zip(problems, completions):
        for c in comps:
            flat_problems.append(problem)
            flat_texts.append(tokenizer.decode(c.tokens, skip_special_tokens=True))
            flat_trunc.append(c.finish_reason == "length")
    scores = env.score_batch(flat_problems, flat_texts, flat_trunc)
    out, i = [], 0
    for problem, prompt, comps in zip(problems, prompts, completions):
        row = []
        for c in comps:
            row.append(ScoredSample(problem, prompt, c, flat_texts[i], scores[i]))
            i += 1
        out.append(row)
    return out


def to_rollout(s: ScoredSample) -> Rollout:
    c = s.completion
    return Rollout(
        problem_id=s.problem.id,
        env=s.problem.env,
        prompt_tokens=np.asarray(s.prompt_tokens, dtype=np.int32),
        response_tokens=np.asarray(c.tokens, dtype=np.int32),
        sampler_logp=np.asarray(c.logprobs, dtype=np.float32),
        versions=np.asarray(c.versions, dtype=np.int32),
        reward=float(s.score.reward),
        correct=bool(s.score.correct),
        format_ok=bool(s.score.format_ok),
        truncated=c.finish_reason == "length",
    )


def eval_records(samples: list[list[ScoredSample]]) -> list[dict[str, Any]]:
    """Per-(problem, sample) records in the form marin_rl.runlog.eval_summary.summarize_eval expects."""
    return [
        {
            "problem_id": s.problem.id,
            "env": s.problem.env,
            "level": s.problem.level,
            "sample_index": j,
            "correct": bool(s.score.correct),
            "reward": float(s.score.reward),
            "response_tokens": len(s.completion.tokens),
        }
        for row in samples
        for j, s in enumerate(row)
    ]
