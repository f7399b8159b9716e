"""Build a labelled grader-audit set: (response, gold, is_correct) rows for `python -m marin_rl.verifiers.audit`.

    python -m marin_rl.verifiers.audit_set --env math500 --data-dir ../shared/data --out math500_labels.jsonl

Rows come from the local data through the project's loader (no copies of MATH-500 / GSM8K are kept in the repo)
plus a few hand-written rows that need no data. The label follows the answer contract the prompts state: the
final answer is the LAST `\\boxed{}` (math500), or the last `\\boxed{}` / `####` line, whichever comes later
(gsm8k); a response is correct when that final answer equals the gold mathematically, whatever else it says.
Categories (the `category` field):
  reference       the dataset's own solution (positive)
  equivalent      the gold in another spelling: \\frac{1}{2} / 0.5 / 1/2, \\dfrac, 1,000, 18.00, $18 (positive)
  perturbed       the gold with one digit changed, or another problem's answer (negative)
  box_vs_number   the box holds a wrong answer, the gold is the last number written after it (negative)
  number_vs_box   the box holds the gold, a wrong number comes after it (positive)
  several_boxes   the gold in an earlier box, a wrong answer in the last one (negative) ...
  last_box        ... or the other way round (positive)
  hidden_in_text  the gold appears only in the prose, in no box / after no `####` (negative)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from marin_rl.environments.config import Gsm8kComponentConfig, Math500ComponentConfig
from marin_rl.environments.data import GSM8K_FORMAT, MATH_FORMAT, Record, load_splits, resolve_data_dir

ENVS = ("math500", "gsm8k")
DEFAULT_PROBLEMS = 100  # problems drawn from the test set; ~8 rows each
DEFAULT_SEED = 0

# Hand-written rows (no dataset needed): equivalent spellings and the hacks, for a MATH-style grader.
SYNTHETIC_MATH = [
    ("So $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", True, "equivalent"),
    ("So $x = \\boxed{0.5}$.", "\\frac{1}{2}", True, "equivalent"),
    ("So $x = \\boxed{1/2}$.", "\\frac{1}{2}", True, "equivalent"),
    ("So $x = \\boxed{\\dfrac12}$.", "\\frac{1}{2}", True, "equivalent"),
    ("So $x = \\boxed{\\frac{2}{4}}$.", "\\frac{1}{2}", True, "equivalent"),
    ("The answer is $\\boxed{\\frac{1}{2}}$.", "0.5", True, "equivalent"),
    ("The point is $\\boxed{(1, 2)}$.", "\\left( 1, 2 \\right)", True, "equivalent"),
    ("The length is $\\boxed{2\\sqrt{2}}$.", "\\sqrt{8}", True, "equivalent"),
    ("The ratio is $\\boxed{\\frac{\\sqrt{2}}{2}}$.", "\\frac{1}{\\sqrt{2}}", True, "equivalent"),
    ("The angle is $\\boxed{30^\\circ}$.", "30", True, "equivalent"),
    ("So $\\boxed{x=5}$.", "5", True, "equivalent"),
    ("The answer is $\\boxed{\\text{(B)}}$.", "\\text{(B)}", True, "equivalent"),
    ("The angle is $\\boxed{\\frac{\\pi}{2}}$.", "\\pi/2", True, "equivalent"),
    ("The side is $\\boxed{2\\sqrt3}$.", "2\\sqrt{3}", True, "equivalent"),
    ("The side is $\\boxed{5\\text{ cm}}$.", "5", True, "equivalent"),
    ("So $\\boxed{x^2+2x+1}$.", "(x+1)^2", True, "equivalent"),
    ("So $\\boxed{1,000}$.", "1000", True, "equivalent"),
    ("The day is $\\boxed{\\text{Monday}}$.", "\\text{Monday}", True, "equivalent"),
    ("So $\\boxed{\\boxed{5}}$.", "5", True, "equivalent"),
    ("So $\\boxed{0.333}$.", "\\frac{1}{3}", False, "perturbed"),  # rounded, not equal
    ("So $\\boxed{3.14}$.", "\\pi", False, "perturbed"),
    ("So $\\boxed{5 \\pm 1}$.", "5", False, "perturbed"),
    ("So $\\boxed{5 \\text{ or } 7}$.", "5", False, "several_boxes"),  # two answers in one box
    ("So $\\boxed{5, 7}$.", "5", False, "several_boxes"),
    ("So $\\boxed{5}$ and then $\\boxed{}$.", "5", False, "several_boxes"),  # the last box is empty
    ("So $x = \\boxed{0.51}$.", "\\frac{1}{2}", False, "perturbed"),
    ("So $x = \\boxed{2}$.", "\\frac{1}{2}", False, "perturbed"),
    ("The point is $\\boxed{(2, 1)}$.", "(1, 2)", False, "perturbed"),
    ("The answer is $\\boxed{-5}$.", "5", False, "perturbed"),
    ("Hence $\\boxed{3}$. (Some might say 5.)", "5", False, "box_vs_number"),
    ("Hence $\\boxed{5}$, not 3.", "5", True, "number_vs_box"),
    ("It is $\\boxed{5}$ or perhaps $\\boxed{6}$.", "5", False, "several_boxes"),
    ("It is $\\boxed{6}$; no wait, it is $\\boxed{5}$.", "5", True, "last_box"),
    ("The answer is 5.", "5", False, "hidden_in_text"),
    ("The answer is 5. $\\boxed{}$", "5", False, "hidden_in_text"),
    ("$\\boxed{\\text{not } 5}$", "5", False, "hidden_in_text"),
    ("$\\boxed{\\text{I think 5 is wrong}}$", "5", False, "hidden_in_text"),
    ("$\\boxed{5", "5", False, "hidden_in_text"),  # unbalanced box: no committed answer
]
SYNTHETIC_GSM8K = [
    ("She pays 18 dollars.\n#### 18", "18", True, "equivalent"),
    ("She pays 18 dollars.\n#### $18", "18", True, "equivalent"),
    ("She pays 18 dollars.\n#### 18.00", "18", True, "equivalent"),
    ("In total 1000.\n#### 1,000", "1000", True, "equivalent"),
    ("The answer is \\boxed{18}.", "18", True, "equivalent"),
    ("#### 17", "18", False, "perturbed"),
    ("#### 17\nSome say 18.", "18", False, "box_vs_number"),
    ("#### 18 or #### 19", "18", False, "several_boxes"),
    ("#### 19\nNo: #### 18", "18", True, "last_box"),
    ("The answer is 18.", "18", False, "hidden_in_text"),
    ("18", "18", False, "hidden_in_text"),
]

_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
_INTEGER = re.compile(r"^-?\d+$")
_DECIMAL = re.compile(r"^-?\d+\.\d+$")
MAX_DECIMAL_DIGITS = 8


def row(response: str, gold: str, is_correct: bool, category: str, source: str) -> dict:
    return {"id": f"{category}/{source}", "category": category, "response": response, "gold": gold,
            "is_correct": is_correct}


def terminating_decimal(value: Fraction) -> str | None:
    """`value` as a finite decimal (denominator 2^a 5^b, at most MAX_DECIMAL_DIGITS decimals), else None."""
    for digits in range(1, MAX_DECIMAL_DIGITS + 1):
        scaled = value * 10**digits
        if scaled.denominator == 1:
            return f"{float(value):.{digits}f}"
    return None


def equivalent_forms(gold: str) -> list[str]:
    """Other spellings of the same value for simple golds: fractions <-> a/b <-> decimals, integers with .0 or
    thousands separators; [] for everything else."""
    gold = gold.strip()
    if match := _FRACTION.match(gold):
        sign, numerator, denominator = match.group(1), int(match.group(2)), int(match.group(3))
        value = Fraction(numerator, denominator) * (-1 if sign else 1)
        forms = [f"{sign}{numerator}/{denominator}", f"{sign}\\dfrac{{{numerator}}}{{{denominator}}}"]
        decimal = terminating_decimal(value)
        return forms + ([decimal] if decimal else [])
    if _INTEGER.match(gold):
        number = int(gold)
        return [f"{number}.0"] + ([f"{number:,}"] if abs(number) >= 1000 else [])
    if _DECIMAL.match(gold):
        value = Fraction(gold)
        if value.denominator <= 1000:
            return [f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value >= 0
                    else f"-\\frac{{{-value.numerator}}}{{{value.denominator}}}"]
    return []


def perturbed(gold: str) -> str | None:
    """The gold with its first digit d replaced by (d + 1) mod 10 (a different value), or None without digits."""
    match = re.search(r"\d", gold)
    if match is None:
        return None
    return gold[: match.start()] + str((int(match.group()) + 1) % 10) + gold[match.end() :]


def wrong_answer(record: Record, others: Sequence[Record]) -> str:
    """A wrong answer for `record`: its gold perturbed, else the first other gold spelled differently."""
    changed = perturbed(record.gold)
    if changed is not None:
        return changed
    return next(o.gold for o in others if o.gold.strip() != record.gold.strip())


def math_rows(record: Record, others: Sequence[Record]) -> list[dict]:
    """The labelled rows one MATH-500 problem gives (see the categories in the module docstring)."""
    gold, wrong, source = record.gold, wrong_answer(record, others), record.id
    boxed = "We work it out step by step.\nThe final answer is $\\boxed{{{}}}$."
    rows = [row(record.reference, gold, True, "reference", source)] if record.reference else []
    rows += [row(boxed.format(form), gold, True, "equivalent", f"{source}#{i}")
             for i, form in enumerate(equivalent_forms(gold))]
    rows += [
        row(boxed.format(wrong), gold, False, "perturbed", source),
        row(f"So the answer is $\\boxed{{{wrong}}}$. Check: substituting ${gold}$ works too.", gold, False,
            "box_vs_number", source),
        row(f"So the answer is $\\boxed{{{gold}}}$. Note that ${wrong}$ does not work.", gold, True,
            "number_vs_box", source),
        row(f"It is $\\boxed{{{gold}}}$, or possibly $\\boxed{{{wrong}}}$.", gold, False, "several_boxes", source),
        row(f"First guess $\\boxed{{{wrong}}}$; on checking, $\\boxed{{{gold}}}$.", gold, True, "last_box", source),
        row(f"After simplifying, the answer is ${gold}$.", gold, False, "hidden_in_text", source),
    ]
    return rows


def gsm8k_rows(record: Record, others: Sequence[Record]) -> list[dict]:
    """The labelled rows one GSM8K problem gives (see the categories in the module docstring)."""
    gold, wrong, source = record.gold, wrong_answer(record, others), record.id
    rows = [row(record.reference, gold, True, "reference", source)] if record.reference else []
    rows += [row(f"Adding up gives the total.\n#### {form}", gold, True, "equivalent", f"{source}#{i}")
             for i, form in enumerate(equivalent_forms(gold)[:1])]
    rows += [
        row(f"Adding up gives the total.\n#### {wrong}", gold, False, "perturbed", source),
        row(f"#### {wrong}\nThough {gold} is also possible.", gold, False, "box_vs_number", source),
        row(f"The total is {wrong}? No.\n#### {gold}", gold, True, "number_vs_box", source),
        row(f"#### {gold}\nor maybe\n#### {wrong}", gold, False, "several_boxes", source),
        row(f"#### {wrong}\nWait, recount.\n#### {gold}", gold, True, "last_box", source),
        row(f"So she has {gold} left.", gold, False, "hidden_in_text", source),
    ]
    return rows


def synthetic_rows(env: str) -> list[dict]:
    """The hand-written rows for `env` (no data needed)."""
    table = SYNTHETIC_MATH if env == "math500" else SYNTHETIC_GSM8K
    return [row(response, gold, label, category, f"synthetic-{i}")
            for i, (response, gold, label, category) in enumerate(table)]


def load_test_records(env: str, data_dir: str) -> list[Record]:
    """The test split of `env` through the project's loader (<data_dir>/<env>/test.jsonl or <data_dir>/test.jsonl)."""
    fmt, config = (MATH_FORMAT, Math500ComponentConfig(kind="math500")) if env == "math500" else (
        GSM8K_FORMAT, Gsm8kComponentConfig(kind="gsm8k"))
    _, test = load_splits(fmt, resolve_data_dir(None, data_dir, env), True, config.hub_test, config.hub_train,
                          config.hub_timeout_s)
    return test


def build_rows(env: str, records: Sequence[Record], n_problems: int = DEFAULT_PROBLEMS,
               seed: int = DEFAULT_SEED) -> list[dict]:
    """Synthetic rows plus the rows of `n_problems` test problems drawn with a seeded generator."""
    if env not in ENVS:
        raise ValueError(f"env must be one of {list(ENVS)}, got {env!r}")
    order = np.random.default_rng(seed).permutation(len(records))[:n_problems]
    chosen = [records[int(i)] for i in order]
    make = math_rows if env == "math500" else gsm8k_rows
    rows = synthetic_rows(env)
    for index, record in enumerate(chosen):
        rows += make(record, chosen[index + 1 :] + chosen[:index])
    return rows


def write_rows(rows: Sequence[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m marin_rl.verifiers.audit_set", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=ENVS, required=True)
    parser.add_argument("--data-dir", required=True,
                        help="folder with <env>/test.jsonl (or test.jsonl), e.g. ../shared/data")
    parser.add_argument("--out", type=Path, required=True, help="labelled JSONL to write")
    parser.add_argument("--problems", type=int, default=DEFAULT_PROBLEMS,
                        help="test problems to draw (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="draws the problems (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = build_rows(args.env, load_test_records(args.env, args.data_dir), args.problems, args.seed)
    write_rows(rows, args.out)
    positives = sum(r["is_correct"] for r in rows)
    print(f"wrote {len(rows)} rows ({positives} correct, {len(rows) - positives} incorrect) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
