"""Loading the datasets behind data environments: local JSONL first, else the published sets on the hub.

Local layout (what a user without hub access provides via `env.data_dir=...`):
  math500: <dir>/test.jsonl (fields problem, answer, [solution, level, unique_id, subject]) and optionally
           <dir>/train.jsonl (MATH train: problem, solution, [answer, level]; answer defaults to the last box).
  gsm8k:   <dir>/train.jsonl and <dir>/test.jsonl (fields question, answer ending in `#### <number>`).
A bad line is an error naming the file and line number.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from marin_rl.environments.config import HubDatasetConfig
from marin_rl.verifiers import extract_last_boxed, gsm8k_gold_number, parse_plain_number

logger = logging.getLogger(__name__)

_HUB_ENDPOINT = "https://huggingface.co"
_HUB_PORT = 443
_TRUE_VALUES = ("1", "true", "yes", "on")


class DataUnavailableError(RuntimeError):
    """Neither local files nor the hub could provide a dataset."""


@dataclass(frozen=True)
class Record:
    """One dataset example, normalised across sources."""

    id: str
    question: str
    gold: str
    reference: str | None
    level: str | None


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line; a bad line raises ValueError naming `path:line`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such JSONL file: {path}")
    required = tuple(required)
    rows: list[tuple[int, dict]] = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number}: not valid JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_number}: expected a JSON object, got {type(row).__name__}")
            missing = [key for key in required if not isinstance(row.get(key), str) or not row[key].strip()]
            if missing:
                raise ValueError(f"{path}:{line_number}: missing or empty string field(s) {missing}")
            rows.append((line_number, row))
    if not rows:
        raise ValueError(f"{path}: no examples (the file is empty)")
    return rows


def _normalize_level(level: object) -> str | None:
    """MATH levels come as 3 or "Level 3"; report "3"."""
    if level is None:
        return None
    text = str(level).strip()
    match = re.fullmatch(r"(?:Level\s*)?(\w+)", text)
    return match.group(1) if match else text


def _problem_key(text: str) -> str:
    """Identity of a problem statement for de-duplication (whitespace differences ignored)."""
    return " ".join(text.split())


# ------------------------------------------------------------------------------------------------------ hub
def _hub_unavailable(dataset: str, reason: str, kind: str) -> DataUnavailableError:
    return DataUnavailableError(
        f"{kind}: could not load {dataset} from the Hugging Face hub ({reason}). Point the environment at local "
        f"files instead: env.data_dir=/path/with/test.jsonl (see marin_rl/environments/data.py for the fields); "
        f"with only the test file available, also set env.components.N.split_from_test=true."
    )


def _hub_reachable(timeout_s: float) -> str | None:
    """None when a TCP connection to the hub endpoint opens within timeout_s, else the reason it did not."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # behind a proxy a direct probe says nothing; let `datasets` try
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", _HUB_ENDPOINT))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or _HUB_PORT
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return f"{host}:{port} unreachable within {timeout_s:g}s: {error}"


def load_hub_rows(hub: HubDatasetConfig, timeout_s: float, kind: str) -> list[dict]:
    """Rows of a published dataset via `datasets.load_dataset`, failing fast (and clearly) without the hub."""
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE_VALUES
    if not offline:  # offline mode reads the local cache only, which is fast; otherwise probe before waiting
        reason = _hub_reachable(timeout_s)
        if reason is not None:
            raise _hub_unavailable(hub.path, reason, kind)
    try:
        import datasets

        dataset = datasets.load_dataset(hub.path, hub.name, split=hub.split)
    except Exception as error:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        raise _hub_unavailable(hub.path, f"{type(error).__name__}: {error}", kind) from error
    return [dict(row) for row in dataset]


# ------------------------------------------------------------------------------------ local or hub splits
@dataclass(frozen=True)
class DatasetFormat:
    """How one dataset's rows become Records, and what to tell a user whose train file is missing."""

    kind: str  # environment kind, used in messages
    id_prefix: str  # record ids are <id_prefix>-<split>/<line or row index>
    required: tuple[str, ...]  # string fields every local row must have
    make_record: Callable[[dict, str, str], Record]  # (row, id, where) -> Record; ValueError names `where`
    train_file_hint: str  # what belongs in <data_dir>/train.jsonl
    skip_bad_hub_rows: bool  # published rows without a gradable answer are skipped (and counted), not fatal
    drop_test_problems_from_train: bool  # the train set overlaps the test set (MATH train vs MATH-500)


def _records_from_file(fmt: DatasetFormat, path: Path, split: str) -> list[Record]:
    return [
        fmt.make_record(row, f"{fmt.id_prefix}-{split}/{line_number}", f"{path}:{line_number}")
        for line_number, row in read_jsonl(path, required=fmt.required)
    ]


def _records_from_hub(
    fmt: DatasetFormat, hub: HubDatasetConfig, timeout_s: float, split: str
) -> list[Record]:
    records, skipped = [], 0
    for index, row in enumerate(load_hub_rows(hub, timeout_s, fmt.kind)):
        try:
            records.append(fmt.make_record(row, f"{fmt.id_prefix}-{split}/{index}", f"{hub.path}[{index}]"))
        except (KeyError, ValueError):
            if not fmt.skip_bad_hub_rows:
                raise
            skipped += 1
    if skipped:
        logger.warning("%s: skipped %d rows of %s without an answer", fmt.kind, skipped, hub.path)
    return records


def load_splits(
    fmt: DatasetFormat,
    data_dir: str | None,
    split_from_test: bool,
    hub_test: HubDatasetConfig,
    hub_train: HubDatasetConfig,
    hub_timeout_s: float,
) -> tuple[list[Record] | None, list[Record]]:
    """(train, test) from <data_dir>/{train,test}.jsonl, else from the hub; train is None when split_from_test."""
    if data_dir is None:
        test = _records_from_hub(fmt, hub_test, hub_timeout_s, "test")
        if split_from_test:
            return None, test
        train = _records_from_hub(fmt, hub_train, hub_timeout_s, "train")
    else:
        directory = Path(data_dir)
        test = _records_from_file(fmt, directory / "test.jsonl", "test")
        if split_from_test:
            return None, test
        train_path = directory / "train.jsonl"
        if not train_path.is_file():
            raise DataUnavailableError(
                f"{fmt.kind}: {train_path} not found. Add {fmt.train_file_hint} there, or set "
                f"env.components.N.split_from_test=true to train and evaluate on disjoint splits of test.jsonl."
            )
        train = _records_from_file(fmt, train_path, "train")
    if fmt.drop_test_problems_from_train:
        train = _drop_test_problems(train, test, fmt.kind)
    return train, test


def _drop_test_problems(train: list[Record], test: list[Record], kind: str) -> list[Record]:
    """Train records whose problem statement is not in the test set (no training on held-out problems)."""
    held_out = {_problem_key(record.question) for record in test}
    kept = [record for record in train if _problem_key(record.question) not in held_out]
    logger.info(
        "%s: %d train problems (%d removed as test duplicates)", kind, len(kept), len(train) - len(kept)
    )
    return kept


# ----------------------------------------------------------------------------------------------- math500
def _math_record(row: dict, row_id: str, where: str) -> Record:
    answer = row.get("answer")
    solution = row.get("solution")
    if not isinstance(answer, str) or not answer.strip():
        answer = extract_last_boxed(solution) if isinstance(solution, str) else None
    if not answer or not answer.strip():
        raise ValueError(f"{where}: no `answer` field and no \\boxed{{}} answer in `solution`")
    return Record(
        id=str(row.get("unique_id") or row_id),
        question=row["problem"],
        gold=answer.strip(),
        reference=solution if isinstance(solution, str) and solution.strip() else None,
        level=_normalize_level(row.get("level")),
    )


MATH_FORMAT = DatasetFormat(
    kind="math500",
    id_prefix="math",
    required=("problem",),
    make_record=_math_record,
    train_file_hint="a MATH train file",
    skip_bad_hub_rows=True,
    drop_test_problems_from_train=True,  # MATH train contains some MATH-500 problems
)


# ------------------------------------------------------------------------------------------------- gsm8k
_CALCULATOR_ANNOTATION = re.compile(r"<<[^<>]*>>")


def _gsm8k_record(row: dict, row_id: str, where: str) -> Record:
    answer = row["answer"]
    try:
        gold = gsm8k_gold_number(answer)
    except ValueError:
        raise ValueError(f"{where}: `answer` has no '#### <number>' line") from None
    if parse_plain_number(gold) is None:
        raise ValueError(f"{where}: the text after '####' is not a number: {gold!r}")
    # The <<48/2=24>> calculator annotations are tool calls in the original release, not text to imitate.
    return Record(
        id=row_id,
        question=row["question"],
        gold=gold,
        reference=_CALCULATOR_ANNOTATION.sub("", answer),
        level=None,
    )


GSM8K_FORMAT = DatasetFormat(
    kind="gsm8k",
    id_prefix="gsm8k",
    required=("question", "answer"),
    make_record=_gsm8k_record,
    train_file_hint="the GSM8K train file",
    skip_bad_hub_rows=False,  # every published GSM8K row has a '#### n' answer; a bad one means a wrong dataset
    drop_test_problems_from_train=False,  # GSM8K's train and test splits are disjoint by construction
)


def resolve_data_dir(component_dir: str | None, env_dir: str | None, kind: str) -> str | None:
    """The component's own data_dir, else env.data_dir/<kind> when that folder exists, else env.data_dir."""
    if component_dir is not None:
        return component_dir
    if env_dir is None:
        return None
    per_kind = Path(env_dir) / kind
    return str(per_kind) if per_kind.is_dir() else env_dir
