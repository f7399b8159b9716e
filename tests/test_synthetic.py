"""Synthetic data generation (real grading; a fake sampler stands in for the model) and SFT JSONL loading."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from marin_rl.environments import build_environment
from marin_rl.environments.config import EnvConfig
from marin_rl.environments.synthetic import generate_synthetic, load_sft_jsonl


def addition_env():
    return build_environment(EnvConfig(name="t", components=[{"kind": "mock", "task": "addition_medium"}]), 0)


def fake_adder(prompts, n):
    """Test double for a model: for prompt a+b it answers a+b+j for sample j when a is odd (mixed outcomes:
    sample 0 right, the rest wrong), always right when a % 4 == 0, always wrong otherwise."""
    out = []
    for prompt in prompts:
        a, b = map(int, re.search(r"(\d+)\+(\d+)", prompt).groups())
        group = []
        for j in range(n):
            if a % 2:
                text = str(a + b + j)
            elif a % 4 == 0:
                text = str(a + b)
            else:
                text = str(a + b + 1)
            group.append((text, len(prompt), len(text), False))
        out.append(group)
    return out


def expected_correct(problem, j):
    a = int(problem.question.split("+")[0])
    return (a % 2 == 1 and j == 0) or a % 4 == 0


@pytest.mark.parametrize("keep", ["all", "correct", "mixed"])
def test_generate_synthetic_grades_and_filters(tmp_path, keep):
    env = addition_env()
    problems = env.sample(30, np.random.default_rng(0))
    out = tmp_path / "sub" / f"{keep}.jsonl"
    stats = generate_synthetic(env, problems, fake_adder, n=3, out_path=out, keep=keep, batch_size=7)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    truth = {(p.id, j): expected_correct(p, j) for p in problems for j in range(3)}
    assert stats["n_problems"] == 30 and stats["n_samples"] == 90
    assert stats["n_correct"] == sum(truth.values())
    assert stats["n_written"] == len(lines)
    for line in lines:
        assert set(line) >= {
            "prompt",
            "response",
            "reward",
            "correct",
            "prompt_tokens",
            "response_tokens",
            "env",
        }
        assert line["correct"] == (line["response"] == str(eval_sum(line["prompt"])))
        assert line["reward"] == (1.0 if line["correct"] else 0.0)
        assert line["env"] == "addition_medium" and line["response_tokens"] == len(line["response"])
    by_problem = {}
    for problem in problems:
        by_problem.setdefault(problem.id, []).extend(truth[(problem.id, j)] for j in range(3))
    if keep == "all":
        assert len(lines) == 90
    elif keep == "correct":
        assert len(lines) == stats["n_correct"] and all(line["correct"] for line in lines)
    else:
        mixed = {pid for pid, outcomes in by_problem.items() if any(outcomes) and not all(outcomes)}
        assert mixed and {line["problem_id"] for line in lines} == mixed
        assert len(lines) == 3 * sum(1 for p in problems if p.id in mixed)
    assert not list(out.parent.glob("*.partial"))
    examples = load_sft_jsonl(out) if lines else []
    assert len(examples) == len(lines)


def eval_sum(prompt: str) -> int:
    a, b = map(int, re.search(r"(\d+)\+(\d+)", prompt).groups())
    return a + b


def test_generate_synthetic_with_real_gsm8k_grading(shared_data_dir, tmp_path):
    config = EnvConfig(name="g", data_dir=str(shared_data_dir), components=[{"kind": "gsm8k"}])
    env = build_environment(config, 0)
    try:
        problems = env.eval_problems(6)
        by_prompt = {env.render(p, "chat")[0]["content"]: p for p in problems}

        def sampler(prompts, n):
            groups = []
            for prompt in prompts:
                problem = by_prompt[prompt[0]["content"]]
                right = env.reference_response(problem)
                wrong = f"I list {problem.gold} and more.\n#### {int(problem.gold.replace(',', '')) + 1}"
                groups.append([(right, 100, 50, False), (wrong, 100, 20, True)][:n])
            return groups

        out = tmp_path / "gsm8k.jsonl"
        stats = generate_synthetic(env, problems, sampler, n=2, out_path=out, keep="correct", style="chat")
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert stats["n_correct"] == 6 and len(lines) == 6
        assert all(line["correct"] and "####" in line["response"] for line in lines)
        assert all(isinstance(line["prompt"], list) and line["prompt"][0]["role"] == "user" for line in lines)
        examples = load_sft_jsonl(out)
        assert [e["problem_id"] for e in examples] == [p.id for p in problems]
    finally:
        env.close()


def test_generate_synthetic_checks_the_sampler(tmp_path):
    env = addition_env()
    problems = env.sample(4, np.random.default_rng(0))
    out = tmp_path / "x.jsonl"
    with pytest.raises(ValueError, match="expected 2 per prompt"):
        generate_synthetic(env, problems, lambda prompts, n: [[("1", 1, 1, False)] for _ in prompts], 2, out)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))
    with pytest.raises(ValueError, match="keep must be one of"):
        generate_synthetic(env, problems, fake_adder, 2, out, keep="best")


def test_load_sft_jsonl_reports_bad_lines(tmp_path):
    path = tmp_path / "sft.jsonl"
    good = json.dumps({"prompt": "Q: 1+1\nA: ", "response": "2"})
    chat = json.dumps({"prompt": [{"role": "user", "content": "hi"}], "response": "hello", "extra": 1})
    path.write_text(f"{good}\n\n{chat}\n")
    examples = load_sft_jsonl(path)
    assert [e["response"] for e in examples] == ["2", "hello"] and examples[1]["extra"] == 1
    cases = {
        "{oops": r"sft\.jsonl:2: not valid JSON",
        json.dumps({"prompt": "x"}): r"sft\.jsonl:2: missing or empty string field\(s\) \['response'\]",
        json.dumps({"prompt": "x", "response": ""}): r"sft\.jsonl:2: missing or empty string field\(s\) \['response'\]",
        json.dumps({"response": "y"}): r"sft\.jsonl:2: missing `prompt`",
        json.dumps({"prompt": [{"role": "user"}], "response": "y"}): r"sft\.jsonl:2: every chat message",
        json.dumps(["prompt", "response"]): r"sft\.jsonl:2: expected a JSON object",
    }
    for bad, message in cases.items():
        path.write_text(f"{good}\n{bad}\n")
        with pytest.raises(ValueError, match=message):
            load_sft_jsonl(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="no examples"):
        load_sft_jsonl(path)
    with pytest.raises(FileNotFoundError):
        load_sft_jsonl(tmp_path / "missing.jsonl")
