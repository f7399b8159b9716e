"""What the sampler takes and returns: prompts in, completions with per-token log-probs and policy versions out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length"]


@dataclass
class SampleRequest:
    prompt_tokens: list[int]
    n: int = 1  # generations of this prompt


@dataclass
class Completion:
    """One generated response (prompt not included). All per-token lists have len(tokens) entries."""

    prompt_index: int
    tokens: list[int]
    logprobs: list[float]  # log softmax(logits / T)[token]: the trainer's log-prob at the same temperature
    versions: list[int]  # policy version (weights) that produced each token
    # "stop": EOS or a stop string (both kept in tokens); "length": max_new_tokens reached
    finish_reason: FinishReason
    # log-prob under the top-k/top-p truncated, renormalised distribution the token was drawn from
    # (== logprobs when truncation is off; 0 for greedy). See marin_rl/inference/token_choice.py.
    sampling_logprobs: list[float]

    @property
    def min_version(self) -> int:
        return min(self.versions)

    @property
    def max_version(self) -> int:
        return max(self.versions)

    @property
    def version_span(self) -> tuple[int, int]:
        """(oldest, newest) policy version among this response's tokens."""
        return self.min_version, self.max_version
