"""Environments: mock tasks, MATH-500 / GSM8K / classification data loading, rewards, mixtures, conf/env YAMLs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from pydantic import ValidationError

from marin_rl.environments import (
    MOCK_TASKS,
    DataUnavailableError,
    MixtureEnvironment,
    build_environment,
)
from marin_rl.environments.config import EnvConfig, RewardConfig
from marin_rl.environments.mixture import allocate_counts
from marin_rl.environments.rewards import combine_reward

CONF_ENV = Path(__file__).resolve().parents[1] / "conf" / "env"
PRINTABLE = {chr(c) for c in range(32, 127)} | {"\n"}


def mock_env(task: str, **options):
    return build_environment(
        EnvConfig(name="t", components=[{"kind": "mock", "task": task, **options}]), seed=0
    )


# ------------------------------------------------------------------------------------------------------ mock
@pytest.mark.parametrize("task", sorted(MOCK_TASKS))
def test_mock_task_reference_is_correct_and_fits_the_char_model(task):
    env = mock_env(task)
    problems = env.sample(200, np.random.default_rng(1)) + env.eval_problems()
    for problem in problems:
        prompt = env.render(problem, "plain")
        reference = env.reference_response(problem)
        assert set(prompt + reference) <= PRINTABLE
        longest = 99 if task == "chain" else 40  # chain's worked answers are long by design (chain_task.py)
        assert len(prompt) <= 40 and len(reference) <= longest, (prompt, reference)
        score = env.score(problem, reference)
        assert score.correct and score.format_ok and score.reward == 1.0
        assert env.score(
            problem, f"  {reference}\n"
        ).correct  # surrounding whitespace is not part of the answer
    if MOCK_TASKS[task].needs_correctness:
        wrong = [env.score(p, env.reference_response(p) + "0") for p in problems]
        assert not any(score.correct for score in wrong)
        assert all(score.reward == 0.0 for score in wrong)


def test_mock_sampling_is_seeded():
    env = mock_env("addition_medium")
    first = env.sample(50, np.random.default_rng(7))
    assert first == env.sample(50, np.random.default_rng(7))
    assert first != env.sample(50, np.random.default_rng(8))
    # Without a generator, the environment's own stream (from the build seed) is used, reproducibly.
    config = EnvConfig(name="t", components=[{"kind": "mock", "task": "addition_medium"}])
    assert build_environment(config, 3).sample(20) == build_environment(config, 3).sample(20)
    assert build_environment(config, 3).sample(20) != build_environment(config, 4).sample(20)


@pytest.mark.parametrize(
    "task", ["addition_medium", "addition_hard", "comparison", "counting", "reverse", "repeat"]
)
def test_mock_eval_set_is_disjoint_from_training(task):
    env = mock_env(task)
    assert env.disjoint
    held_out = {p.question for p in env.eval_problems()}
    assert len(held_out) == 200
    trained = {p.question for p in env.sample(3000, np.random.default_rng(0))}
    assert not held_out & trained
    assert env.eval_problems() == env.eval_problems()  # fixed order
    assert env.eval_problems(10) == env.eval_problems()[:10]


def test_small_mock_spaces_share_train_and_eval():
    env = mock_env("addition_easy")
    assert not env.disjoint
    assert {p.question for p in env.eval_problems()} == {f"{a}+{b}" for a in range(10) for b in range(10)}
    forced = mock_env("addition_easy", eval_split="disjoint", eval_size=50)
    held_out = {p.question for p in forced.eval_problems()}
    assert 0 < len(held_out) < 100
    assert not held_out & {p.question for p in forced.sample(500, np.random.default_rng(0))}


def test_cats_rewards_mentioning_cats_only():
    env = mock_env("cats")
    problem = env.sample(1, np.random.default_rng(0))[0]
    assert env.score(problem, "I love my Cat").correct
    assert not env.score(problem, "dogs are fine").correct


def test_mock_chat_rendering_is_a_user_message():
    env = mock_env("addition_easy")
    problem = env.sample(1, np.random.default_rng(0))[0]
    messages = env.render(problem, "chat")
    assert messages == [{"role": "user", "content": f"{problem.question}\nAnswer with the result only."}]
    with pytest.raises(ValueError, match="render style"):
        env.render(problem, "html")


# --------------------------------------------------------------------------------------------------- rewards
def test_reward_terms_combine():
    config = RewardConfig(correct=1.0, incorrect=-0.5, format=0.1)
    assert combine_reward(config, correct=True, format_ok=True) == pytest.approx(1.1)
    assert combine_reward(config, correct=False, format_ok=False) == pytest.approx(-0.5)
    assert combine_reward(config, correct=False, format_ok=True) == pytest.approx(-0.4)
    env = mock_env("addition_easy", reward=config.model_dump())
    problem = env.sample(1, np.random.default_rng(0))[0]
    assert env.score(problem, problem.gold).reward == pytest.approx(1.1)
    assert env.score(problem, "abc").reward == pytest.approx(-0.5)  # wrong and not digits
    scores = env.score_batch([problem, problem], [problem.gold, "x"], [True, False])
    assert [s.truncated for s in scores] == [True, False]


# --------------------------------------------------------------------------------------------------- config
def test_config_errors_name_the_problem():
    with pytest.raises(ValidationError, match="unknown mock task 'additon'"):
        EnvConfig(name="t", components=[{"kind": "mock", "task": "additon"}])
    with pytest.raises(ValidationError, match="split_from_test"):
        EnvConfig(name="t", components=[{"kind": "mock", "task": "addition_easy", "split_from_test": True}])
    with pytest.raises(ValidationError, match="kind"):
        EnvConfig(name="t", components=[{"kind": "poetry"}])
    with pytest.raises(ValidationError, match="distinct `name:`"):
        EnvConfig(name="t", components=[{"kind": "mock", "task": "cats"}, {"kind": "mock", "task": "cats"}])
    with pytest.raises(ValidationError, match="overlong"):
        RewardConfig(overlong={"enabled": True})  # length shaping is loss.overlong's, not the env's
    with pytest.raises(ValidationError, match="needs `path`"):
        EnvConfig(name="t", components=[{"kind": "classification", "path": "???"}])
    with pytest.raises(ValidationError, match="weight"):
        EnvConfig(name="t", components=[{"kind": "mock", "task": "cats", "weight": 0}])


def _load_yaml(name: str, overrides: list[str] = ()) -> EnvConfig:
    """conf/env/NAME.yaml with `key=value` overrides applied the way Hydra applies them (list indices included)."""
    config = OmegaConf.load(CONF_ENV / f"{name}.yaml")
    for override in overrides:
        key, value = override.split("=", 1)
        OmegaConf.update(config, key, yaml.safe_load(value), merge=True)
    return EnvConfig.model_validate(OmegaConf.to_container(config, resolve=True))


def test_every_conf_env_yaml_validates_and_builds(shared_data_dir, tmp_path):
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(
        "".join(json.dumps({"text": f"t{i}", "label": "ab"[i % 2]}) + "\n" for i in range(40))
    )
    overrides = {
        "math500": [f"data_dir={shared_data_dir}", "components.0.split_from_test=true"],
        "gsm8k": [f"data_dir={shared_data_dir}"],
        "math_mix": [f"data_dir={shared_data_dir}", "components.0.split_from_test=true"],
        "classification": [f"components.0.path={labelled}"],
    }
    names = sorted(path.stem for path in CONF_ENV.glob("*.yaml"))
    assert {"mock", "mock_mix", "mock_long", "math500", "gsm8k", "classification"} <= set(names)
    for name in names:
        env = build_environment(_load_yaml(name, overrides.get(name, [])), seed=0)
        try:
            problems = env.sample(4, np.random.default_rng(0))
            assert len(problems) == 4
            assert env.eval_problems(3)
        finally:
            env.close()


def test_yaml_defaults_match_code_defaults():
    """A knob documented in YAML must mean the same as the pydantic default (templates with braces included)."""
    from marin_rl.environments.config import Gsm8kComponentConfig, Math500ComponentConfig, MockComponentConfig

    for name, model in [
        ("mock", MockComponentConfig),
        ("math500", Math500ComponentConfig),
        ("gsm8k", Gsm8kComponentConfig),
    ]:
        from_yaml = _load_yaml(name).components[0]
        default = model(kind=name, **({"task": "addition_easy"} if name == "mock" else {}))
        assert from_yaml.plain_template == default.plain_template
        assert from_yaml.chat_template == default.chat_template


def test_dotlist_override_of_a_component():
    config = _load_yaml("mock", ["components.0.task=addition_medium", "components.0.eval_size=20"])
    env = build_environment(config, seed=0)
    assert env.name == "addition_medium"
    assert len(env.eval_problems()) == 20


def test_mock_long_correct_answers_are_longer_than_early_stops():
    env = build_environment(_load_yaml("mock_long"), seed=0)
    problems = env.sample(100, np.random.default_rng(0))
    for problem in problems:
        reference = env.reference_response(problem)
        early_stop = reference[: len(reference) // 2]
        assert not env.score(problem, early_stop).correct
    assert np.mean([len(p.gold) for p in problems]) > 6


def test_chain_grades_the_final_number_and_lengths_span_an_order_of_magnitude():
    env = build_environment(_load_yaml("mock_chain"), seed=0)
    problems = env.sample(400, np.random.default_rng(0))
    lengths = [len(env.reference_response(p)) for p in problems]
    assert min(lengths) == 11 and max(lengths) == 99  # 1 and 12 steps of 8 characters, plus "#nn"
    assert sorted({p.level for p in problems}) == ["steps_01-04", "steps_05-08", "steps_09-12"]
    assert all(int(p.level[6:8]) <= p.reference.count(";") <= int(p.level[9:]) for p in problems)
    problem = next(p for p in problems if p.reference.count(";") >= 3)
    reference = problem.reference
    assert problem.gold == reference.rsplit("#", 1)[1] and problem.gold.isdigit()
    assert env.score(problem, f"#{problem.gold}").correct  # a shortcut to the right number counts ...
    assert not env.score(problem, f"#{problem.gold}").format_ok  # ... but is not a worked chain
    wrong_step = reference.replace("=", "=1", 1)  # one bad step, same final number: still graded on the final
    assert env.score(problem, wrong_step).correct and not env.score(problem, reference + "0").correct
    assert not env.score(problem, reference[:-1]).correct  # a truncated final number
    assert not env.score(problem, reference.rsplit("#", 1)[0]).correct  # a chain without its final answer
    assert not env.score(problem, reference + ";1+1=2").correct  # text after the answer: no final answer


# --------------------------------------------------------------------------------------------------- mixture
def test_allocate_counts_is_balanced():
    rng = np.random.default_rng(0)
    for n in range(0, 40):
        counts = allocate_counts(n, [3.0, 1.0, 0.5], rng)
        assert sum(counts) == n
        for count, weight in zip(counts, [3.0, 1.0, 0.5], strict=True):
            assert abs(count - n * weight / 4.5) < 1.0


def test_mixture_samples_by_weight_and_dispatches_per_component():
    config = _load_yaml("mock_mix")
    env = build_environment(config, seed=0)
    assert isinstance(env, MixtureEnvironment)
    assert [c.name for c in env.components] == ["addition_easy", "comparison", "opposites", "counting"]
    problems = env.sample(500, np.random.default_rng(0))
    counts = {
        name: sum(p.env == name for p in problems)
        for name in ["addition_easy", "comparison", "opposites", "counting"]
    }
    assert counts == {"addition_easy": 200, "comparison": 100, "opposites": 100, "counting": 100}
    evaluation = env.eval_problems(10)
    assert [p.env for p in evaluation] == sum(([name] * 10 for name in counts), [])
    scores = env.score_batch(problems[:50], [p.gold for p in problems[:50]])
    assert all(s.correct for s in scores)
    assert env.render(problems[0]) == env.components[
        [c.name for c in env.components].index(problems[0].env)
    ].render(problems[0])


# ---------------------------------------------------------------------------------------------------- math500
def test_math500_split_from_test_is_disjoint_and_graded(shared_data_dir):
    config = EnvConfig(
        name="m", data_dir=str(shared_data_dir), components=[{"kind": "math500", "split_from_test": True}]
    )
    env = build_environment(config, seed=0)
    try:
        train = {p.id for p in env._train}
        held_out = {p.id for p in env.eval_problems()}
        assert len(train) + len(held_out) == 500 and not train & held_out
        assert len(held_out) == 250
        assert all(p.level in {"1", "2", "3", "4", "5"} for p in env.eval_problems())
        problems = env.sample(8, np.random.default_rng(0))
        assert {p.id for p in problems} <= train
        chat = env.render(problems[0], "chat")
        assert "\\boxed{}" in chat[0]["content"] and problems[0].question in chat[0]["content"]
        responses = [env.reference_response(p) for p in problems] + ["I think \\boxed{}"]
        scores = env.score_batch(problems + [problems[0]], responses)
        assert all(s.correct and s.format_ok for s in scores[:-1])
        assert not scores[-1].correct and not scores[-1].format_ok
        assert env.pool._pool is None  # all decided without sympy: no grading processes were started
        assert scores[0].extracted == problems[0].gold or scores[0].correct
        # a different split seed gives a different split
        other = EnvConfig(
            name="m",
            data_dir=str(shared_data_dir),
            components=[{"kind": "math500", "split_from_test": True, "split_seed": 1}],
        )
        assert {p.id for p in build_environment(other, 0).eval_problems()} != held_out
    finally:
        env.close()


def test_math500_trains_on_math_train_minus_math500(shared_data_dir, tmp_path):
    test_lines = (shared_data_dir / "math500" / "test.jsonl").read_text().splitlines()
    (tmp_path / "test.jsonl").write_text("\n".join(test_lines) + "\n")
    duplicate = json.loads(test_lines[0])
    train_rows = [
        {
            "problem": "What is $1+1$?",
            "solution": "It is $\\boxed{2}$.",
            "level": "Level 1",
            "type": "Algebra",
        },
        {"problem": "  " + duplicate["problem"] + " ", "solution": duplicate["solution"], "level": "Level 2"},
        {"problem": "What is $2+2$?", "solution": "It is $\\boxed{4}$.", "level": "Level 1"},
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in train_rows))
    env = build_environment(
        EnvConfig(name="m", components=[{"kind": "math500", "data_dir": str(tmp_path)}]), 0
    )
    assert sorted(p.question for p in env._train) == ["What is $1+1$?", "What is $2+2$?"]
    assert {p.gold for p in env._train} == {"2", "4"}
    assert {p.level for p in env._train} == {"1"}
    assert len(env.eval_problems()) == 500


def test_math500_without_train_file_says_what_to_do(shared_data_dir):
    config = EnvConfig(
        name="m", components=[{"kind": "math500", "data_dir": str(shared_data_dir / "math500")}]
    )
    with pytest.raises(DataUnavailableError, match="split_from_test=true"):
        build_environment(config, 0)


def test_missing_data_fails_fast_with_a_hint(monkeypatch):
    # Never touch the real hub: an unreachable endpoint (closed local port) and, separately, offline mode.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # With a proxy set, the loader skips its probe and asks `datasets` directly.
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    for kind in ("math500", "gsm8k"):
        started = time.monotonic()
        with pytest.raises(DataUnavailableError, match="env.data_dir=/path/with/test.jsonl"):
            build_environment(EnvConfig(name="x", components=[{"kind": kind, "hub_timeout_s": 2}]), 0)
        assert time.monotonic() - started < 10


def test_hub_rows_become_records_like_local_lines(monkeypatch):
    """The hub path (no network: `load_hub_rows` answers from memory) builds the same records as local files:
    MATH rows without a recoverable answer are skipped, a malformed GSM8K row is an error naming the row."""
    from marin_rl.environments import data
    from marin_rl.environments.config import HubDatasetConfig

    rows = {
        "math-test": [{"problem": "1+1?", "answer": "2", "level": "Level 1"}, {"problem": "no answer"}],
        "math-train": [{"problem": "1+1?", "solution": "\\boxed{2}"}, {"problem": "2+2?", "solution": "\\boxed{4}"}],
        "gsm-test": [{"question": "q", "answer": "work\n#### 7"}],
        "gsm-train": [{"question": "q2", "answer": "no final line"}],
    }
    monkeypatch.setattr(data, "load_hub_rows", lambda hub, timeout_s, kind: rows[hub.path])
    hub = lambda path: HubDatasetConfig(path=path, split="x")  # noqa: E731

    train, test = data.load_splits(data.MATH_FORMAT, None, False, hub("math-test"), hub("math-train"), 1.0)
    assert [(r.id, r.gold, r.level) for r in test] == [("math-test/0", "2", "1")]
    assert [r.question for r in train] == ["2+2?"]  # "1+1?" is a test problem, removed from train
    _, test = data.load_splits(data.GSM8K_FORMAT, None, True, hub("gsm-test"), hub("gsm-train"), 1.0)
    assert [(r.id, r.gold) for r in test] == [("gsm8k-test/0", "7")]
    with pytest.raises(ValueError, match=r"gsm-train\[0\].*####"):
        data.load_splits(data.GSM8K_FORMAT, None, False, hub("gsm-test"), hub("gsm-train"), 1.0)


def test_bad_jsonl_line_is_reported_with_its_number(tmp_path):
    good = {"question": "q", "answer": "work\n#### 5"}
    lines = [json.dumps(good), json.dumps(good), "{not json", json.dumps(good)]
    (tmp_path / "test.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "train.jsonl").write_text(json.dumps(good) + "\n")
    config = EnvConfig(name="g", components=[{"kind": "gsm8k", "data_dir": str(tmp_path)}])
    with pytest.raises(ValueError, match=r"test\.jsonl:3: not valid JSON"):
        build_environment(config, 0)
    lines[2] = json.dumps({"question": "q", "answer": "no marker"})
    (tmp_path / "test.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:3: `answer` has no '#### <number>'"):
        build_environment(config, 0)
    lines[2] = json.dumps({"question": "q"})
    (tmp_path / "test.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:3: missing or empty string field\(s\) \['answer'\]"):
        build_environment(config, 0)


# ------------------------------------------------------------------------------------------------------ gsm8k
def test_gsm8k_loads_local_files_and_grades_references(shared_data_dir):
    # The top-level env.data_dir resolves to <data_dir>/gsm8k.
    env = build_environment(
        EnvConfig(name="g", data_dir=str(shared_data_dir), components=[{"kind": "gsm8k"}]), 0
    )
    try:
        assert len(env.eval_problems()) == 1319
        # 4 of the 7,473 train questions share a 13-gram with a test question (decontam is on by default)
        assert env.decontamination == {"checked": 7473, "dropped": 4} and env.train_size == 7469
        problems = env.sample(16, np.random.default_rng(0))
        assert all("<<" not in env.reference_response(p) for p in problems)  # calculator annotations removed
        scores = env.score_batch(problems, [env.reference_response(p) for p in problems])
        assert all(s.correct and s.format_ok for s in scores)
        assert all(s.extracted == p.gold for s, p in zip(scores, problems, strict=True))
        listing = " ".join(str(i) for i in range(1000))  # mentions every small number, commits to none
        assert not env.score(problems[0], listing).correct
        assert env.score(problems[0], f"#### {problems[0].gold}").correct
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- classification
def _write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_classification_exact_label_match_after_normalisation(tmp_path):
    rows = [{"text": f"review {i}", "label": "positive" if i % 3 else "negative"} for i in range(60)]
    path = _write_jsonl(tmp_path / "reviews.jsonl", rows)
    env = build_environment(EnvConfig(name="c", components=[{"kind": "classification", "path": path}]), 0)
    assert env.labels == ["negative", "positive"]
    held_out = {p.id for p in env.eval_problems()}
    assert held_out and not held_out & {p.id for p in env._train}
    problem = env.eval_problems(1)[0]
    assert env.score(problem, f' "{problem.gold.upper()}." ').correct
    other = "positive" if problem.gold == "negative" else "negative"
    wrong = env.score(problem, other)
    assert not wrong.correct and wrong.format_ok
    rambling = env.score(problem, f"I think it is {problem.gold}")
    assert not rambling.correct and not rambling.format_ok
    prompt = env.render(problem, "plain")
    assert problem.question in prompt and "negative, positive" in prompt


def test_classification_rejects_unknown_labels_with_line_number(tmp_path):
    rows = [{"text": "a", "label": "spam"}, {"text": "b", "label": "ham"}, {"text": "c", "label": "eggs"}]
    path = _write_jsonl(tmp_path / "mail.jsonl", rows)
    config = EnvConfig(
        name="c", components=[{"kind": "classification", "path": path, "labels": ["spam", "ham"]}]
    )
    with pytest.raises(ValueError, match=r"mail\.jsonl:3: label 'eggs' is not one of"):
        build_environment(config, 0)


def test_classification_with_explicit_eval_file(tmp_path):
    train = _write_jsonl(tmp_path / "train.jsonl", [{"t": f"x{i}", "y": "ab"[i % 2]} for i in range(10)])
    held = _write_jsonl(tmp_path / "eval.jsonl", [{"t": f"z{i}", "y": "ab"[i % 2]} for i in range(4)])
    component = {
        "kind": "classification",
        "path": train,
        "eval_path": held,
        "text_field": "t",
        "label_field": "y",
    }
    env = build_environment(EnvConfig(name="c", components=[component]), 0)
    assert sorted(p.question for p in env.eval_problems()) == ["z0", "z1", "z2", "z3"]
    assert len(env.sample(25, np.random.default_rng(0))) == 25
