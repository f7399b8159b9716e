"""Answer extraction, MATH / GSM8K grading on the full reference sets, and the hardened grading pool."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

import pytest

from marin_rl.verifiers import (
    GradingPool,
    extract_last_boxed,
    final_answer_candidate,
    grade_batch,
    gsm8k_correct,
    math_correct,
    math_quick_verdict,
    normalize_math_answer,
)


@pytest.fixture(scope="module")
def pool():
    with GradingPool(max_workers=2, timeout_s=5.0) as grading_pool:
        yield grading_pool


# ------------------------------------------------------------------------------------------------ extraction
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is $\\boxed{42}$.", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),  # the LAST box counts
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are content
        ("\\boxed {7}", "7"),
        ("\\fbox{7}", "7"),
        ("\\boxed{}", ""),
        ("\\boxed{\\frac{1}{2}", None),  # unbalanced
        ("no box here 42", None),
        ("\\boxed{3} and \\boxed{\\frac{1}{2}", None),  # the last box is broken: no answer
        ("\\boxedx{3}", None),  # another command, not a box
    ],
)
def test_extract_last_boxed(text, expected):
    assert extract_last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("work...\n#### 18", "18"),
        ("#### 17\nactually \\boxed{18}", "18"),  # the box comes last
        ("\\boxed{17} so\n#### 18\nbye", "18"),  # the marker comes last; only its line
        ("the answer is 18", None),
    ],
)
def test_final_answer_candidate(text, expected):
    assert final_answer_candidate(text) == expected


def test_normalization_is_meaning_preserving_spelling_only():
    assert normalize_math_answer("\\left( \\dfrac{1}{2}, 3 \\right)") == "(\\frac{1}{2},3)"
    assert normalize_math_answer("90^\\circ") == "90"
    assert normalize_math_answer("\\text{(C)}") == "(C)"
    assert normalize_math_answer("x+1") != normalize_math_answer("x-1")


# ---------------------------------------------------------------------------------------------- math_correct
MATH_CASES = [
    ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\frac12}", "0.5", True),
    ("\\boxed{90}", "90^\\circ", True),
    ("\\boxed{\\text{(C)}}", "C", True),
    ("\\boxed{Evelyn}", "\\text{Evelyn}", True),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "(3,\\frac{\\pi}{2})", True),
    ("\\boxed{[1,2)}", "[1,2)", True),
    ("\\boxed{[1,2]}", "[1,2)", False),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", True),
    ("\\boxed{\\sqrt{50}}", "5\\sqrt{2}", True),
    ("\\boxed{10\\%}", "10", True),
    ("\\boxed{x=2}", "2", True),
    ("\\boxed{3}", "4", False),
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", False),
    ("\\boxed{(1,2)}", "(2,1)", False),
    ("The answer is 4.", "4", False),  # no box
    ("\\boxed{}", "4", False),  # empty box
    ("\\boxed{4", "4", False),  # unbalanced box
    ("\\boxed{4} no wait \\boxed{5}", "4", False),  # only the last box counts
    ("1 2 3 4 5 6 \\boxed{7}", "4", False),  # listing numbers earns nothing
]


@pytest.mark.parametrize(("response", "gold", "expected"), MATH_CASES)
def test_math_correct_cases(pool, response, gold, expected):
    assert math_correct(response, gold, pool) is expected


def test_math_batch_matches_single_calls(pool):
    responses, golds, expected = zip(*MATH_CASES, strict=True)
    assert grade_batch("math", list(responses), list(golds), pool) == list(expected)


def _first_number_plus_one(answer: str) -> str | None:
    match = re.search(r"\d+", answer)
    if match is None:
        return None
    return answer[: match.start()] + str(int(match.group()) + 1) + answer[match.end() :]


def _replace_last_box(solution: str, content: str) -> str:
    start = solution.rfind("\\boxed")
    old = extract_last_boxed(solution)
    end = solution.index(old, start) + len(old) + 1  # past the closing brace
    return solution[:start] + "\\boxed{" + content + "}" + solution[end:]


def test_all_math500_references_correct_and_perturbed_incorrect(pool, shared_data_dir):
    rows = [json.loads(line) for line in (shared_data_dir / "math500" / "test.jsonl").open()]
    assert len(rows) == 500
    golds = [row["answer"] for row in rows]
    verdicts = grade_batch("math", [row["solution"] for row in rows], golds, pool)
    wrong = [row["unique_id"] for row, ok in zip(rows, verdicts, strict=True) if not ok]
    assert not wrong, f"reference solutions graded incorrect: {wrong}"

    # Perturbation: the answer's first integer + 1; answers without digits get another such answer instead.
    wordy = [answer for answer in golds if _first_number_plus_one(answer) is None]
    assert len(set(wordy)) > 1
    perturbed = []
    for row in rows:
        changed = _first_number_plus_one(row["answer"])
        if changed is None:
            changed = wordy[(wordy.index(row["answer"]) + 1) % len(wordy)]
        perturbed.append(_replace_last_box(row["solution"], changed))
    verdicts = grade_batch("math", perturbed, golds, pool)
    accepted = [
        (row["answer"], extract_last_boxed(p))
        for row, p, ok in zip(rows, perturbed, verdicts, strict=True)
        if ok
    ]
    assert not accepted, f"perturbed answers graded correct: {accepted}"
    assert pool.timeouts == 0


# --------------------------------------------------------------------------------------------- gsm8k_correct
@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [
        ("so 3 + 4 = 7\n#### 7", "7", True),
        ("#### 1,000", "1000", True),
        ("#### $18.00", "18", True),
        ("The total is \\boxed{\\$18.50}.", "18.5", True),
        ("#### -3", "-3", True),
        ("#### 18.0", "18", True),  # trailing zeros after the point are ignored
        ("The answer is 18.", "18", False),  # no final-answer marker: a mention is not an answer
        ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "18", False),  # listing numbers earns nothing
        ("#### 18\nwait, 17", "18", True),  # only the answer line after the marker counts
        ("#### 17\nno, it is 18", "18", False),
        ("\\boxed{18} ... #### 17", "18", False),  # the marker comes last
        ("#### 18 dollars", "18", False),  # the final answer must be a number
        ("#### 1e1", "10", False),  # no exponent notation
        ("####", "0", False),
    ],
)
def test_gsm8k_correct_cases(response, gold, expected):
    assert gsm8k_correct(response, gold) is expected


def test_gsm8k_rejects_non_numeric_gold():
    with pytest.raises(ValueError, match="not a plain number"):
        gsm8k_correct("#### 3", "three")


def test_all_gsm8k_references_correct_and_perturbed_incorrect(pool, shared_data_dir):
    rows = [json.loads(line) for line in (shared_data_dir / "gsm8k" / "test.jsonl").open()]
    assert len(rows) == 1319
    golds = [row["answer"].rsplit("####", 1)[1].strip() for row in rows]
    verdicts = grade_batch("gsm8k", [row["answer"] for row in rows], golds, pool)
    assert all(verdicts), [i for i, ok in enumerate(verdicts) if not ok]

    perturbed = []
    for row, gold in zip(rows, golds, strict=True):
        body = row["answer"].rsplit("####", 1)[0]
        # Keep every number of the worked solution (including the gold itself) in the text: only the final
        # answer changes, so this also checks that mentioning the gold earns nothing.
        wrong = str(int(gold.replace(",", "")) + 1)
        perturbed.append(f"{body}The answer is {gold}?\n#### {wrong}")
    verdicts = grade_batch("gsm8k", perturbed, golds, pool)
    assert not any(verdicts), [i for i, ok in enumerate(verdicts) if ok]


# ------------------------------------------------------------------------------------------ untrusted input
def test_code_in_a_response_executes_nothing(pool, tmp_path):
    marker = tmp_path / "pwned"
    payloads = [
        f"\\boxed{{__import__('os').system('touch {marker}')}}",
        f"\\boxed{{eval(\"open('{marker}', 'w')\")}}",
        f"\\boxed{{exec(\"import os; os.system('touch {marker}')\")}}",
        f"\\boxed{{(lambda: __import__('pathlib').Path('{marker}').touch())()}}",
        f"```python\nimport os\nos.system('touch {marker}')\n```\n\\boxed{{os.system('touch {marker}')}}",
    ]
    assert grade_batch("math", payloads, ["0"] * len(payloads), pool) == [False] * len(payloads)
    hash_payloads = [f"#### __import__('os').system('touch {marker}')", f"\\boxed{{exec('touch {marker}')}}"]
    assert grade_batch("gsm8k", hash_payloads, ["0", "0"], pool) == [False, False]
    # The symbolic core itself, in this process (no pool in between), must not execute it either.
    from marin_rl.verifiers.symbolic import grade_math_unbounded

    for payload in payloads:
        assert grade_math_unbounded(payload, "0") is False
    assert not marker.exists(), "grading executed code from a response"


def test_pathological_answer_times_out_and_pool_keeps_working():
    with GradingPool(max_workers=1, timeout_s=2.0) as timed_pool:
        assert timed_pool.grade_one("math", "\\boxed{\\frac{1}{2}}", "0.5") is True  # worker started and warm
        started = time.monotonic()
        verdict = timed_pool.grade_one("math", "\\boxed{9^{9^{9^{9^{9}}}}}", "1")
        elapsed = time.monotonic() - started
        assert verdict is False
        assert elapsed < 10.0, f"a tower of exponents held grading for {elapsed:.1f}s"
        assert timed_pool.timeouts == 1
        # The next call works (on a fresh worker), and a batch with a bomb in the middle grades the rest.
        assert timed_pool.grade_one("math", "\\boxed{\\sqrt{50}}", "5\\sqrt{2}") is True
        mixed = timed_pool.grade_many(
            "math", ["\\boxed{(x+1)^2}", "\\boxed{10^{10^{10^{10}}}}", "\\boxed{x^2+2x+1}"], ["x^2+2x+1"] * 3
        )
        assert mixed == [True, False, True]
        assert timed_pool.timeouts == 2


def test_worker_cpu_backstop_ends_a_runaway_item():
    """If the pool's process dies mid-item, nobody kills the worker: the kernel CPU limit must end it."""
    to_worker_read, to_worker_write = os.pipe()
    from_worker_read, from_worker_write = os.pipe()
    args = [str(to_worker_read), str(from_worker_write), "0", "2"]  # no memory cap, 2 CPU-seconds per item
    worker = subprocess.Popen(
        [sys.executable, "-m", "marin_rl.verifiers.grading_worker", *args],
        pass_fds=(to_worker_read, from_worker_write),
    )
    os.close(to_worker_read)
    os.close(from_worker_write)
    inbox, outbox = Connection(from_worker_read, writable=False), Connection(to_worker_write, readable=False)
    try:
        assert inbox.poll(120) and inbox.recv() == "ready"
        outbox.send(("math", [(0, "\\boxed{9^{9^{9^{9^{9}}}}}", "1")]))
        assert worker.wait(timeout=60) == -signal.SIGXCPU
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        inbox.close()
        outbox.close()


def test_pool_survives_a_killed_worker(pool):
    assert pool.grade_many("gsm8k", ["#### 1", "#### 2"], ["1", "3"]) == [True, False]
    victim = pool.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while victim in pool.worker_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim not in pool.worker_pids()
    responses = [f"#### {i}" for i in range(40)]
    assert pool.grade_many("gsm8k", responses, [str(i) for i in range(40)]) == [True] * 40


def test_pool_works_from_a_non_main_thread(pool):
    """Rollout workers grade from Ray actor threads, where signal-based timeouts are unavailable."""
    results = {}

    def grade():
        results["verdicts"] = grade_batch(
            "math", ["\\boxed{\\sqrt{8}}", "\\boxed{3}"], ["2\\sqrt{2}", "2"], pool
        )

    thread = threading.Thread(target=grade)
    thread.start()
    thread.join(timeout=60)
    assert results["verdicts"] == [True, False]


def test_quick_verdict_decides_easy_cases_without_the_pool():
    assert math_quick_verdict("\\boxed{\\dfrac{3}{4}}", "\\frac34") is True
    assert math_quick_verdict("\\boxed{12}", "13") is False
    assert math_quick_verdict("no box", "13") is False
    assert math_quick_verdict("\\boxed{x+1}", "1+x") is None  # needs the symbolic check


def test_pool_kinds_match_the_graders(pool):
    from marin_rl.verifiers import KINDS
    from marin_rl.verifiers.graders import GRADERS

    assert set(KINDS) == set(GRADERS)
    # math_symbolic skips the string fast paths but reaches the same verdicts
    assert grade_batch(
        "math_symbolic", ["\\boxed{0.5}", "\\boxed{3}", "no box"], ["\\frac12", "4", "1"], pool
    ) == [
        True,
        False,
        False,
    ]


def test_pool_rejects_bad_calls(pool):
    with pytest.raises(ValueError, match="unknown grading kind"):
        pool.grade_many("algebra", ["x"], ["x"])
    with pytest.raises(ValueError, match="2 responses but 1 golds"):
        pool.grade_many("math", ["a", "b"], ["a"])
    assert pool.grade_many("math", [], []) == []
    with pytest.raises(ValueError, match="timeout_s"):
        GradingPool(timeout_s=0)


def test_pool_counts_graded_items_and_logs_the_first_grader_errors(caplog):
    from marin_rl.verifiers.pool import LOGGED_ERRORS

    with GradingPool(max_workers=1) as pool:
        assert pool.grade_many("gsm8k", ["#### 1", "#### 2", "no number"], ["1", "1", "1"]) == [True, False, False]
        assert pool.counts() == {"graded": 3, "timeouts": 0, "crashes": 0, "errors": 0}
        with caplog.at_level("WARNING", logger="marin_rl.verifiers.pool"):
            for i in range(LOGGED_ERRORS + 2):  # what the worker's (index, False, error) reply leads to
                pool._record_error("math", (i, f"response {i}", "gold"), "ValueError: bad LaTeX")
    assert pool.counts()["errors"] == LOGGED_ERRORS + 2
    logged = [r.getMessage() for r in caplog.records if "raised" in r.getMessage()]
    assert len(logged) == LOGGED_ERRORS and "'response 0'" in logged[0] and "ValueError: bad LaTeX" in logged[0]
