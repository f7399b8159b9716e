"""Synthetic data: sample n responses per prompt with a model, grade them, write JSONL (rejection sampling).

The same files feed an SFT warm-start (`load_sft_jsonl`). The model is reached only through `sample_fn`, so this
module knows nothing about Levanter, vLLM or Ray; `launch.py mode=generate` supplies the sampler.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from marin_rl.environments.base import Environment, Messages, Problem, RenderStyle
from marin_rl.environments.data import read_jsonl

KeepMode = Literal["all", "correct", "mixed"]
KEEP_MODES = ("all", "correct", "mixed")


class Sample(NamedTuple):
    """One sampled response as a sampler returns it (plain tuples of these four fields are accepted too)."""

    text: str
    prompt_tokens: int
    response_tokens: int
    truncated: bool


# prompts (rendered: text or chat messages), n -> for each prompt, n samples
SampleFn = Callable[[list[str | Messages], int], Sequence[Sequence[Sample | tuple]]]


def _keep_problem(correct: list[bool], keep: KeepMode) -> list[bool]:
    """Which of one problem's samples to write: all; only correct ones; or all of a problem with mixed outcomes."""
    if keep == "all":
        return [True] * len(correct)
    if keep == "correct":
        return list(correct)
    mixed = any(correct) and not all(correct)
    return [mixed] * len(correct)


def generate_synthetic(
    env: Environment,
    problems: Sequence[Problem],
    sample_fn: SampleFn,
    n: int,
    out_path: str | Path,
    keep: KeepMode = "all",
    style: RenderStyle = "plain",
    batch_size: int = 64,
) -> dict:
    """Sample `n` responses per problem, grade them with `env`, and write the kept ones to `out_path` (JSONL).

    Each line: prompt (as rendered), response, reward, correct, prompt_tokens, response_tokens, truncated, env,
    problem_id, gold, level. keep="correct" is rejection sampling; keep="mixed" keeps only problems whose samples
    were neither all right nor all wrong (the ones that carry a GRPO learning signal). The file appears
    atomically when done. Returns counts: n_problems, n_samples, n_correct, n_written, n_problems_written,
    mean_correct.
    """
    if keep not in KEEP_MODES:
        raise ValueError(f"keep must be one of {list(KEEP_MODES)}, got {keep!r}")
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got n={n}, batch_size={batch_size}")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    stats = {"n_problems": 0, "n_samples": 0, "n_correct": 0, "n_written": 0, "n_problems_written": 0}
    try:
        _write_graded(env, problems, sample_fn, n, keep, style, batch_size, partial, stats)
    except BaseException:
        partial.unlink(missing_ok=True)  # never leave a half-written file that looks like data
        raise
    os.replace(partial, out_path)
    stats["mean_correct"] = stats["n_correct"] / stats["n_samples"] if stats["n_samples"] else 0.0
    stats["out_path"] = str(out_path)
    return stats


def _write_graded(
    env: Environment,
    problems: Sequence[Problem],
    sample_fn: SampleFn,
    n: int,
    keep: KeepMode,
    style: RenderStyle,
    batch_size: int,
    partial: Path,
    stats: dict,
) -> None:
    with partial.open("w", encoding="utf-8") as handle:
        for start in range(0, len(problems), batch_size):
            batch = list(problems[start : start + batch_size])
            prompts = [env.render(problem, style) for problem in batch]
            sampled = sample_fn(prompts, n)
            if len(sampled) != len(batch) or any(len(group) != n for group in sampled):
                raise ValueError(
                    f"sample_fn returned {[len(group) for group in sampled]} samples for {len(batch)} prompts; "
                    f"expected {n} per prompt"
                )
            flat = [Sample(*sample) for group in sampled for sample in group]
            scores = env.score_batch(
                [problem for problem in batch for _ in range(n)],
                [sample.text for sample in flat],
                [sample.truncated for sample in flat],
            )
            for index, (problem, prompt) in enumerate(zip(batch, prompts, strict=True)):
                group = flat[index * n : (index + 1) * n]
                group_scores = scores[index * n : (index + 1) * n]
                kept = _keep_problem([score.correct for score in group_scores], keep)
                stats["n_problems"] += 1
                stats["n_samples"] += n
                stats["n_correct"] += sum(score.correct for score in group_scores)
                stats["n_problems_written"] += any(kept)
                for sample, score, keep_it in zip(group, group_scores, kept, strict=True):
                    if not keep_it:
                        continue
                    line = {
                        "prompt": prompt,
                        "response": sample.text,
                        "reward": score.reward,
                        "correct": score.correct,
                        "prompt_tokens": int(sample.prompt_tokens),
                        "response_tokens": int(sample.response_tokens),
                        "truncated": bool(sample.truncated),
                        "env": problem.env,
                        "problem_id": problem.id,
                        "gold": problem.gold,
                        "level": problem.level,
                    }
                    handle.write(json.dumps(line, ensure_ascii=False) + "\n")
                    stats["n_written"] += 1


def _check_messages(value: object, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: `prompt` must be a string or a non-empty list of chat messages")
    for message in value:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise ValueError(
                f"{where}: every chat message needs string `role` and `content`, got {message!r}"
            )


def load_sft_jsonl(path: str | Path) -> list[dict]:
    """SFT examples from a JSONL file with `prompt` (text or chat messages) and `response` (text) per line.

    Extra fields (reward, correct, env, ...) are kept. Blank lines are skipped; any other bad line raises
    ValueError naming `path:line` and what is wrong (the line reading is marin_rl.environments.data.read_jsonl).
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such SFT file: {path}")
    examples = []
    for line_number, row in read_jsonl(path, required=("response",)):
        where = f"{path}:{line_number}"
        if "prompt" not in row:
            raise ValueError(f"{where}: missing `prompt`")
        if not isinstance(row["prompt"], str):
            _check_messages(row["prompt"], where)
        examples.append(row)
    return examples
