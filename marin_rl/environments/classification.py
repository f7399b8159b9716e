"""`classification`: a generic JSONL-backed task (text -> one label of a fixed set), reward = exact label match."""

from __future__ import annotations

import re

import numpy as np

from marin_rl.environments.base import (
    Environment,
    Messages,
    Problem,
    RenderStyle,
    check_style,
    draw_without_replacement,
    fill_template,
    first_problems,
    stable_fraction,
)
from marin_rl.environments.config import ClassificationComponentConfig
from marin_rl.environments.data import read_jsonl

# Quotes, brackets and sentence punctuation around a label ("Positive.", '"spam"') are not part of it.
_LABEL_EDGES = " \t\n\"'`.,;:!?()[]{}*"
_INNER_SPACE = re.compile(r"\s+")


def normalize_label(text: str) -> str:
    """Case-folded, edge punctuation and quotes stripped, inner whitespace collapsed."""
    return _INNER_SPACE.sub(" ", text.strip(_LABEL_EDGES).casefold()).strip()


class ClassificationEnvironment(Environment):
    def __init__(self, config: ClassificationComponentConfig, seed: int = 0) -> None:
        super().__init__(config.resolved_name, config.reward, seed)
        self.config = config
        train_rows = self._read(config.path)
        self.labels = (
            list(config.labels)
            if config.labels is not None
            else sorted({label for _, _, label in train_rows})
        )
        self._label_by_key = {normalize_label(label): label for label in self.labels}
        if len(self._label_by_key) != len(self.labels):
            raise ValueError(f"{self.name}: labels {self.labels} are not distinct after normalisation")
        if len(self.labels) < 2:
            raise ValueError(f"{self.name}: {config.path} has fewer than 2 distinct labels: {self.labels}")
        if config.eval_path is not None:
            train, held_out = train_rows, self._read(config.eval_path)
        else:
            in_eval = [
                stable_fraction(config.split_seed, text) < config.eval_fraction for _, text, _ in train_rows
            ]
            train = [row for row, flag in zip(train_rows, in_eval, strict=True) if not flag]
            held_out = [row for row, flag in zip(train_rows, in_eval, strict=True) if flag]
        if not train or not held_out:
            raise ValueError(
                f"{self.name}: empty {'training' if not train else 'held-out'} set from {config.path}; "
                f"add examples or an eval_path"
            )
        self._train = [self._problem(row) for row in train]
        order = np.random.default_rng(config.split_seed).permutation(len(held_out))
        self._eval = [self._problem(held_out[i]) for i in order][: config.eval_size or len(held_out)]

    def _read(self, path: str) -> list[tuple[str, str, str]]:
        """(id, text, canonical label) per line; unknown labels are errors naming file and line."""
        fields = (self.config.text_field, self.config.label_field)
        rows = []
        for line_number, row in read_jsonl(path, required=fields):
            label = row[self.config.label_field]
            if self.config.labels is not None:
                allowed = {normalize_label(name): name for name in self.config.labels}
                if normalize_label(label) not in allowed:
                    raise ValueError(
                        f"{path}:{line_number}: label {label!r} is not one of {self.config.labels}"
                    )
                label = allowed[normalize_label(label)]
            rows.append((f"{path}:{line_number}", row[self.config.text_field], label))
        return rows

    def _problem(self, row: tuple[str, str, str]) -> Problem:
        row_id, text, label = row
        return Problem(id=row_id, env=self.name, question=text, gold=label, level=None, reference=label)

    def sample(self, n: int, rng: np.random.Generator | None = None) -> list[Problem]:
        rng = self._rng if rng is None else rng
        return draw_without_replacement(self._train, n, rng)

    def eval_problems(self, n: int | None = None) -> list[Problem]:
        return first_problems(self._eval, n)

    def render(self, problem: Problem, style: RenderStyle = "plain") -> str | Messages:
        check_style(style)
        labels = ", ".join(self.labels)
        if style == "plain":
            return fill_template(self.config.plain_template, question=problem.question, labels=labels)
        content = fill_template(self.config.chat_template, question=problem.question, labels=labels)
        return [{"role": "user", "content": content}]

    def judge(self, problem: Problem, response: str) -> tuple[bool, bool, str | None]:
        predicted = self._label_by_key.get(normalize_label(response))
        return predicted == problem.gold, predicted is not None, predicted
