"""The `env:` config node: which environments a run trains and evaluates on, mixed by weight, and their rewards.

One pydantic model, validated once. Each entry of `components` is one environment, told apart by `kind`; only the
options of that kind are accepted (a typo or an option of another kind is an error naming the field).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from marin_rl.config.strict import StrictModel
from marin_rl.environments.mock_tasks import MOCK_TASKS

DATA_KINDS = ("math500", "gsm8k")


class RewardConfig(StrictModel):
    """reward = (correct if the answer is right else incorrect) + format * format_ok (length shaping: loss.overlong)."""

    correct: float = 1.0
    incorrect: float = 0.0
    format: float = 0.0  # small bonus for the expected answer format (a box, a number, a label); 0 = off


class _ComponentBase(StrictModel):
    name: str | None = None  # how metrics name this environment; default: the mock task, else the kind
    weight: float = Field(1.0, gt=0.0)  # share of training prompts drawn from this component
    reward: RewardConfig = RewardConfig()
    split_seed: int = 0  # fixes train/eval splits and eval order; independent of the run seed on purpose
    eval_size: int | None = Field(None, gt=0)  # at most this many held-out problems (None = all)

    @property
    def resolved_name(self) -> str:
        return self.name or self.kind  # type: ignore[attr-defined]


class MockComponentConfig(_ComponentBase):
    kind: Literal["mock"]
    task: str  # one of MOCK_TASKS
    eval_split: Literal["auto", "disjoint", "shared"] = "auto"
    auto_disjoint_min_space: int = Field(
        1000, gt=0
    )  # auto: disjoint only when the task has >= this many problems
    eval_fraction: float = Field(0.2, gt=0.0, lt=1.0)  # hash bucket held out when disjoint
    eval_size: int | None = Field(200, gt=0)
    plain_template: str = "Q: {question}\nA: "
    chat_template: str = "{question}\nAnswer with the result only."

    @field_validator("task")
    @classmethod
    def _known_task(cls, task: str) -> str:
        if task not in MOCK_TASKS:
            raise ValueError(f"unknown mock task {task!r}; allowed: {sorted(MOCK_TASKS)}")
        return task

    @property
    def resolved_name(self) -> str:
        return self.name or self.task


class HubDatasetConfig(StrictModel):
    path: str  # dataset id on the Hugging Face hub
    name: str | None = None  # dataset config name
    split: str


class _DataComponentBase(_ComponentBase):
    data_dir: str | None = None  # local JSONL dir; None = env.data_dir, else the hub
    split_from_test: bool = False  # train and evaluate on disjoint seeded splits of test.jsonl (no train set)
    eval_fraction: float = Field(0.5, gt=0.0, lt=1.0)  # share of test.jsonl held out when split_from_test
    hub_timeout_s: float = Field(5.0, gt=0.0)  # give up on an unreachable hub this fast
    plain_template: str
    chat_template: str


class Math500ComponentConfig(_DataComponentBase):
    kind: Literal["math500"]
    plain_template: str = "Problem: {question}\nPut the final answer in \\boxed{}.\nSolution:"
    chat_template: str = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
    hub_test: HubDatasetConfig = HubDatasetConfig(path="HuggingFaceH4/MATH-500", split="test")
    hub_train: HubDatasetConfig = HubDatasetConfig(path="DigitalLearningGmbH/MATH-lighteval", split="train")


class Gsm8kComponentConfig(_DataComponentBase):
    kind: Literal["gsm8k"]
    plain_template: str = "Question: {question}\nAnswer:"
    chat_template: str = (
        "{question}\nSolve it step by step. Write the final answer as a number on the last line after '####'."
    )
    hub_test: HubDatasetConfig = HubDatasetConfig(path="openai/gsm8k", name="main", split="test")
    hub_train: HubDatasetConfig = HubDatasetConfig(path="openai/gsm8k", name="main", split="train")


class ClassificationComponentConfig(_ComponentBase):
    kind: Literal["classification"]
    path: str  # JSONL with one example per line
    eval_path: str | None = None  # held-out JSONL; None = a seeded hash split of `path`
    eval_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    labels: list[str] | None = None  # the label set; None = every label seen in `path`
    text_field: str = "text"
    label_field: str = "label"
    plain_template: str = "Text: {question}\nLabels: {labels}\nLabel: "
    chat_template: str = "Classify the text. Answer with exactly one of: {labels}.\n\nText: {question}"

    @field_validator("path")
    @classmethod
    def _path_given(cls, path: str) -> str:
        if not path.strip() or path == "???":
            raise ValueError(
                "classification needs `path` (a JSONL file): set env.components.N.path=/path/to/train.jsonl"
            )
        return path

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None and len(labels) < 2:
            raise ValueError(f"classification needs at least 2 labels, got {labels}")
        return labels


EnvComponentConfig = Annotated[
    MockComponentConfig | Math500ComponentConfig | Gsm8kComponentConfig | ClassificationComponentConfig,
    Field(discriminator="kind"),
]


class GradingConfig(StrictModel):
    """The process pool that grades math/gsm8k responses (mock and classification grade in-process)."""

    workers: int | None = Field(None, gt=0)  # None = every CPU this process may use
    timeout_s: float = Field(5.0, gt=0.0)  # per response; a response past it is graded incorrect
    memory_limit_mb: int | None = Field(4096, gt=0)  # address-space cap per worker (None = no cap)
    # A grader that raises grades the response incorrect and is counted (grader/errors); past this share of the
    # responses graded so far, the run stops (a broken grader would otherwise train on silent zeros).
    max_error_rate: float = Field(0.05, ge=0.0, le=1.0)
    min_graded_for_error_rate: int = Field(200, ge=1)  # the share is judged once this many responses were graded


class DecontamConfig(StrictModel):
    """Before a run starts, drop math500/gsm8k training problems (and sft.source JSONL rows) that share a
    normalised word n-gram with, or equal, an evaluation problem of the run (marin_rl/environments/decontam.py)."""

    enabled: bool = True
    ngram: int = Field(13, ge=3)  # n-gram size in words/numbers; smaller drops more


class EnvConfig(StrictModel):
    name: str
    components: list[EnvComponentConfig] = Field(min_length=1)
    data_dir: str | None = None  # default data_dir of math500/gsm8k components: <data_dir>/<kind>/ if present
    grading: GradingConfig = GradingConfig()
    decontam: DecontamConfig = DecontamConfig()

    @model_validator(mode="after")
    def _unique_names(self) -> EnvConfig:
        names = [component.resolved_name for component in self.components]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(
                f"env.components has several components named {duplicates}; give each a distinct `name:`"
            )
        return self
