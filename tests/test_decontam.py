"""Decontamination: planted overlaps between training prompts and the run's evaluation problems are dropped and
counted; clean rows stay; the switch and the n-gram size act. Local JSONL in tmp_path, no Ray, no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spec_helpers import compose_spec

from marin_rl.environments import build_environment
from marin_rl.environments.config import EnvConfig
from marin_rl.environments.decontam import (
    build_eval_index,
    decontam_line,
    decontaminate_sft_rows,
    decontamination_summary,
    normalized_tokens,
    overlaps,
)
from marin_rl.runlog.writer import format_summary_table
from marin_rl.training.sft import sft_examples

# Evaluation (test) questions (invented); the long one has 29 tokens, the short one 4.
LONG_EVAL = ("Mira keeps marbles in three jars. Some of the marbles have a striped pattern, some have a dotted "
             "pattern, and some have a plain pattern. How many marbles?")
SHORT_EVAL = "What is 17+25?"
OTHER_EVAL = "A train leaves at 3 pm and travels 60 miles per hour for 2 hours. How far does it go?"
# Planted overlaps in the training set, and clean rows.
VERBATIM = LONG_EVAL
# Shares the 15-token run "have a striped pattern some have a dotted pattern and some have a plain pattern" with the
# long eval question (different case, punctuation and surroundings).
PARAPHRASE = ("Leo's box: SOME of them have a striped pattern; some have a dotted pattern and some have a plain "
              "pattern!! He has 40 in all. How many plain?")
SHORT_COPY = "what is 17 + 25 ?"  # the short eval question, spaced differently: equal token sequences
CLEAN = [
    "Anna has 5 apples and buys 7 more. How many apples does she have?",
    "What is 17+26?",  # one number away from the short eval question: not the same problem
    "Some of the marbles were blue. A shop sold 12 of them on Monday and 9 on Tuesday. How many were sold?",
]


def gsm8k_row(question: str, answer: int = 1) -> dict:
    return {"question": question, "answer": f"Some work.\n#### {answer}"}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture
def gsm8k_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "gsm8k"
    write_jsonl(directory / "test.jsonl", [gsm8k_row(q) for q in (LONG_EVAL, SHORT_EVAL, OTHER_EVAL)])
    write_jsonl(directory / "train.jsonl", [gsm8k_row(q) for q in (VERBATIM, CLEAN[0], PARAPHRASE, CLEAN[1],
                                                                    SHORT_COPY, CLEAN[2])])
    return directory


def gsm8k_env(directory: Path, **decontam):
    return build_environment(
        EnvConfig(name="g", components=[{"kind": "gsm8k", "data_dir": str(directory)}], decontam=decontam), seed=0)


def test_normalisation_ignores_case_punctuation_and_latex_spelling():
    assert normalized_tokens(r"What is $\dfrac{1}{2}$ of \left( X \right)?") == ("what", "is", "frac", "1", "2",
                                                                                 "of", "x")
    assert normalized_tokens(r"\tfrac{3}{4}") == normalized_tokens(r"\frac{3}{4}")
    assert normalized_tokens(r"\dbinom{8}{4}") == ("binom", "8", "4")
    assert normalized_tokens("3.25 apples") == ("3", "25", "apples")


def test_overlap_needs_n_shared_tokens_or_the_whole_problem():
    index = build_eval_index([LONG_EVAL, SHORT_EVAL], n=13)
    assert overlaps(PARAPHRASE, index) and overlaps(SHORT_COPY, index) and overlaps(VERBATIM, index)
    assert not any(overlaps(text, index) for text in CLEAN)
    # 12 of the shared tokens are not enough at n=13
    assert not overlaps("x y z striped pattern some have a dotted pattern and some have a plain q r s", index)
    assert overlaps("x y z a striped pattern some have a dotted pattern and some have a plain q r s", index)


def test_planted_overlaps_are_dropped_and_counted(gsm8k_dir: Path):
    env = gsm8k_env(gsm8k_dir)
    assert sorted(p.question for p in env.training_problems) == sorted(CLEAN)
    assert env.decontamination == {"checked": 6, "dropped": 3}
    summary = decontamination_summary(env)
    assert summary == {"dropped": 3, "checked": 6, "by_env": {"gsm8k": {"checked": 6, "dropped": 3}}}
    assert decontam_line(summary) == "decontam/dropped = 3 of 6 training problems (gsm8k 3/6)"
    table_lines = format_summary_table({"decontam": summary}).splitlines()
    assert any(line.split() == ["decontam/dropped", "3", "of", "6"] for line in table_lines)
    assert len(env.eval_problems()) == 3  # the evaluation set is never touched


def test_switch_off_and_ngram_size_act(gsm8k_dir: Path):
    off = gsm8k_env(gsm8k_dir, enabled=False)
    assert off.train_size == 6 and decontamination_summary(off) is None
    assert "nothing checked" in decontam_line(None)
    # The paraphrase shares a 15-token run: kept at n=16, dropped at n=15.
    assert PARAPHRASE in {p.question for p in gsm8k_env(gsm8k_dir, ngram=16).training_problems}
    assert PARAPHRASE not in {p.question for p in gsm8k_env(gsm8k_dir, ngram=15).training_problems}


def test_mixture_checks_each_train_set_against_every_eval_set(gsm8k_dir: Path, tmp_path: Path):
    math_dir = tmp_path / "math500"
    write_jsonl(math_dir / "test.jsonl", [{"problem": "Compute $\\dbinom{8}{4}$.", "answer": "70"}])
    write_jsonl(math_dir / "train.jsonl", [
        {"problem": "Find $x$ if $2x = 6$.", "solution": "$\\boxed{3}$"},
        {"problem": OTHER_EVAL, "solution": "$\\boxed{120}$"},  # a GSM8K test question in the MATH train set
        {"problem": "Compute $\\binom{8}{4}$", "solution": "$\\boxed{70}$"},  # the MATH-500 one, \binom spelling
    ])
    config = EnvConfig(name="mix", components=[{"kind": "math500", "data_dir": str(math_dir)},
                                               {"kind": "gsm8k", "data_dir": str(gsm8k_dir)}])
    env = build_environment(config, seed=0)
    math_env = env.components[0]
    assert [p.question for p in math_env.training_problems] == ["Find $x$ if $2x = 6$."]
    # "\\binom" and "\\dbinom" normalise alike, so the MATH-500 problem the loader's exact-statement check misses
    # (other spelling, no final period) is caught here as an identical token sequence
    assert decontamination_summary(env)["by_env"] == {"math500": {"checked": 3, "dropped": 2},
                                                     "gsm8k": {"checked": 6, "dropped": 3}}


def test_everything_overlapping_is_an_error_naming_the_switch(tmp_path: Path):
    write_jsonl(tmp_path / "test.jsonl", [gsm8k_row(LONG_EVAL)])
    write_jsonl(tmp_path / "train.jsonl", [gsm8k_row(PARAPHRASE)])
    with pytest.raises(ValueError, match="env.decontam.enabled=false"):
        gsm8k_env(tmp_path)


def test_sft_rows_from_generate_are_decontaminated(gsm8k_dir: Path, tmp_path: Path, capsys):
    env = gsm8k_env(gsm8k_dir)
    eval_problem = env.eval_problems()[0]
    rows = [
        {"prompt": f"Question: {LONG_EVAL}\nAnswer:", "response": "12", "env": "gsm8k", "problem_id": "x"},
        {"prompt": [{"role": "user", "content": SHORT_EVAL.upper()}], "response": "42"},
        {"prompt": "Question: anything\nAnswer:", "response": "1", "env": "gsm8k", "problem_id": eval_problem.id},
        {"prompt": f"Question: {CLEAN[0]}\nAnswer:", "response": "12", "env": "gsm8k", "problem_id": "y"},
    ]
    kept = decontaminate_sft_rows(rows, env, 13, "synthetic.jsonl")
    assert kept == [rows[3]]
    assert "decontam/dropped = 3 of 4 SFT rows of synthetic.jsonl" in capsys.readouterr().out
    # through sft_examples, the way a warm-start reads sft.source
    path = tmp_path / "synthetic.jsonl"
    write_jsonl(path, rows)
    spec = compose_spec(["env=gsm8k", f"env.data_dir={gsm8k_dir}", f"sft.source={path}"])
    assert sft_examples(spec, env) == [(rows[3]["prompt"], "12")]
    spec_off = compose_spec(["env=gsm8k", f"env.data_dir={gsm8k_dir}", f"sft.source={path}",
                             "env.decontam.enabled=false"])
    assert len(sft_examples(spec_off, env)) == 4
