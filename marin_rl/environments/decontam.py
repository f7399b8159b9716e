"""Decontamination: drop training prompts that overlap an evaluation problem of the run, before the run starts.

Overlap is measured on normalised word n-grams (GPT-3's test-set filter uses 13-grams, Brown et al. 2020, app. C):
text is lower-cased, LaTeX spelling variants are unified (\\dfrac, \\tfrac -> frac; \\dbinom, \\tbinom -> binom;
\\left, \\right, \\!, \\, dropped) and split into runs of letters or digits, so punctuation, dollar signs, braces and whitespace do not
matter. A training text overlaps when it shares one n-gram with any evaluation problem, or when its whole token
sequence equals that of an evaluation problem (which catches problems shorter than n tokens).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from marin_rl.environments.base import Environment, Problem
from marin_rl.environments.data_envs import DatasetEnvironment

logger = logging.getLogger(__name__)

DEFAULT_NGRAM = 13
SHOWN_IDS = 5  # dropped ids named in the log line

_LATEX_SYNONYMS = (
    (re.compile(r"\\[dt](frac|binom)"), r"\\\1"),
    (re.compile(r"\\(?:left|right)\b|\\[!,;:]"), " "),
)
_TOKEN = re.compile(r"[a-z]+|[0-9]+")

T = TypeVar("T")


def normalized_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased runs of letters or of digits, after unifying LaTeX spellings ("$\\dfrac{1}{2}$" -> frac 1 2)."""
    text = text.lower()
    for pattern, replacement in _LATEX_SYNONYMS:
        text = pattern.sub(replacement, text)
    return tuple(_TOKEN.findall(text))


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """All contiguous n-token windows of `tokens` (none when it is shorter than n)."""
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


@dataclass(frozen=True)
class EvalIndex:
    """The n-grams and whole token sequences of the evaluation problems."""

    n: int
    grams: frozenset[tuple[str, ...]]
    whole: frozenset[tuple[str, ...]]


def build_eval_index(eval_texts: Iterable[str], n: int = DEFAULT_NGRAM) -> EvalIndex:
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    grams: set[tuple[str, ...]] = set()
    whole: set[tuple[str, ...]] = set()
    for text in eval_texts:
        tokens = normalized_tokens(text)
        grams |= ngrams(tokens, n)
        if tokens:
            whole.add(tokens)
    return EvalIndex(n, frozenset(grams), frozenset(whole))


def overlaps(text: str, index: EvalIndex) -> bool:
    """True when `text` shares an n-gram with an evaluation problem or equals one after normalisation."""
    tokens = normalized_tokens(text)
    if tokens in index.whole:
        return True
    return any(tuple(tokens[i : i + index.n]) in index.grams for i in range(len(tokens) - index.n + 1))


@dataclass(frozen=True)
class DecontamCounts:
    checked: int  # training rows looked at
    dropped: int  # rows that overlapped an evaluation problem
    dropped_ids: tuple[str, ...]  # ids of the dropped rows (for the log)

    def as_dict(self) -> dict[str, int]:
        return {"checked": self.checked, "dropped": self.dropped}


def filter_overlapping(
    rows: Sequence[T], text_of: Callable[[T], str], index: EvalIndex, id_of: Callable[[T], str] = str
) -> tuple[list[T], DecontamCounts]:
    """(rows that do not overlap the evaluation problems, counts), keeping the input order."""
    kept, dropped = [], []
    for row in rows:
        (dropped if overlaps(text_of(row), index) else kept).append(row)
    return kept, DecontamCounts(len(rows), len(dropped), tuple(id_of(row) for row in dropped))


def prompt_text(prompt: str | list[dict]) -> str:
    """The text of a rendered prompt: itself, or the contents of its chat messages joined."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(message.get("content", "")) for message in prompt)


def log_counts(source: str, counts: DecontamCounts, n: int) -> None:
    """One log line per decontaminated source: decontam/dropped = k of m, and the first dropped ids."""
    shown = ", ".join(counts.dropped_ids[:SHOWN_IDS]) + (" ..." if counts.dropped > SHOWN_IDS else "")
    message = (f"decontam/dropped = {counts.dropped} of {counts.checked} training rows of {source} "
               f"({n}-gram overlap with the evaluation problems){': ' + shown if shown else ''}")
    logger.info(message)


def data_eval_problems(components: Sequence[Environment]) -> list[Problem]:
    """The evaluation problems of the math500/gsm8k components (MATH-500, GSM8K test): what training must not see.
    Mock tasks are left out: their eval may share the train space on purpose (eval_split=shared)."""
    return [p for c in components if isinstance(c, DatasetEnvironment) for p in c.eval_problems()]


def decontaminate_components(components: Sequence[Environment], n: int) -> None:
    """Filter the training problems of every math500/gsm8k component against the evaluation problems of all of them
    (a mixture's MATH train is checked against GSM8K test too); each gets `decontamination` = {"checked", "dropped"}.
    """
    index = build_eval_index((p.question for p in data_eval_problems(components)), n)
    for component in components:
        if not isinstance(component, DatasetEnvironment):
            continue
        kept, counts = filter_overlapping(component.training_problems, lambda p: p.question, index, lambda p: p.id)
        if not kept:
            raise ValueError(f"{component.name}: all {counts.checked} training problems overlap an evaluation "
                             "problem; check the data, or set env.decontam.enabled=false to keep them")
        component.replace_training_problems(kept)
        component.decontamination = counts.as_dict()
        log_counts(component.name, counts, n)


def decontaminate_sft_rows(rows: Sequence[dict], env: Environment, n: int, source: str) -> list[dict]:
    """SFT rows (`load_sft_jsonl`, e.g. written by mode=generate) whose prompt does not overlap an evaluation
    problem of `env`, and that are not generated from one (same env and problem_id); prints the count."""
    eval_problems = data_eval_problems(env.components)
    index = build_eval_index((p.question for p in eval_problems), n)
    eval_ids = {(p.env, p.id) for p in eval_problems}

    def contaminated(row: dict) -> bool:
        return (row.get("env"), row.get("problem_id")) in eval_ids or overlaps(prompt_text(row["prompt"]), index)

    flags = [contaminated(row) for row in rows]
    kept = [row for row, flag in zip(rows, flags, strict=True) if not flag]
    dropped = [row for row, flag in zip(rows, flags, strict=True) if flag]
    counts = DecontamCounts(len(rows), len(dropped), tuple(str(r.get("problem_id", "?")) for r in dropped))
    log_counts(source, counts, n)
    print(f"decontam/dropped = {counts.dropped} of {counts.checked} SFT rows of {source}", flush=True)
    if not kept:
        raise ValueError(f"{source}: all {len(rows)} SFT rows overlap an evaluation problem of the run; "
                         "set env.decontam.enabled=false to keep them")
    return kept


def decontamination_summary(env: Environment) -> dict | None:
    """{"dropped", "checked", "by_env": {name: counts}} over the components that were decontaminated; None if none."""
    by_env = {c.name: c.decontamination for c in env.components if getattr(c, "decontamination", None)}
    if not by_env:
        return None
    return {"dropped": sum(c["dropped"] for c in by_env.values()),
            "checked": sum(c["checked"] for c in by_env.values()), "by_env": by_env}


def decontam_line(summary: dict | None) -> str:
    """The console line of a run: decontam/dropped = k of m training problems (per environment)."""
    if summary is None:
        return "decontam/dropped: nothing checked (env.decontam.enabled=false, or no math500/gsm8k component)"
    parts = ", ".join(f"{name} {c['dropped']}/{c['checked']}" for name, c in summary["by_env"].items())
    return f"decontam/dropped = {summary['dropped']} of {summary['checked']} training problems ({parts})"
