"""Rollouts: the raw, graded samples a rollout worker ships to the trainer.

A `Rollout` is one sampled response with its per-token sampler log-probs, per-token policy versions and the
environment's grade (reward and its components). A `RolloutGroup` is the G responses to one prompt. Nothing here
is shaped, normalised or filtered: reward shaping, advantages and filtering are the trainer's
(`marin_rl.training.data_processing.prepare_batch`), computed when a group is used, so a group reused from the
replay buffer or a batch-level normalisation sees the same raw data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rollout:
    problem_id: str
    env: str
    prompt_tokens: np.ndarray  # int32[P]
    response_tokens: np.ndarray  # int32[R], EOS included when the response stopped
    sampler_logp: np.ndarray  # float32[R], log-prob of each response token under the sampling distribution
    versions: np.ndarray  # int32[R], policy version that produced each token
    reward: float  # the environment's reward, unshaped
    correct: bool  # reward component: the grader's verdict
    format_ok: bool  # reward component: the answer had the expected format (a box, a number, a label)
    truncated: bool  # hit max_new_tokens (finish_reason == "length")

    @property
    def min_version(self) -> int:
        return int(self.versions.min()) if len(self.versions) else -1

    @property
    def max_version(self) -> int:
        return int(self.versions.max()) if len(self.versions) else -1

    @property
    def spans_versions(self) -> bool:
        """True when weights were swapped while this response was being generated (in-flight update)."""
        return self.min_version != self.max_version


@dataclass(frozen=True)
class RolloutGroup:
    rollouts: tuple[Rollout, ...]

    def __reduce__(self):
        """Pickled as one array per field of its rollouts: Ray pickles a worker's groups on every shipment, and four
        small arrays per rollout made 32 rollouts take 1.26 ms to pickle with Ray's cloudpickle (0.44 ms packed,
        docs/benchmarks.md "Stop 35")."""
        rs = self.rollouts
        arrays = tuple(np.concatenate([getattr(r, name) for r in rs]) for name in _ARRAY_FIELDS)
        lengths = np.array([[len(r.prompt_tokens), len(r.response_tokens)] for r in rs], np.int64).reshape(-1, 2)
        scalars = tuple([getattr(r, name) for r in rs] for name in _SCALAR_FIELDS)
        return _unpack_group, (arrays, lengths, scalars)

    @property
    def env(self) -> str:
        return self.rollouts[0].env

    @property
    def rewards_G(self) -> np.ndarray:
        return np.array([r.reward for r in self.rollouts], dtype=np.float32)

    @property
    def min_version(self) -> int:
        return min(r.min_version for r in self.rollouts)

    def __len__(self) -> int:
        return len(self.rollouts)


def staleness(group: RolloutGroup, trainer_version: int) -> int:
    """Trainer steps between the oldest token of the group and the weights about to be updated."""
    return trainer_version - group.min_version


_ARRAY_FIELDS = ("prompt_tokens", "response_tokens", "sampler_logp", "versions")
_SCALAR_FIELDS = ("problem_id", "env", "reward", "correct", "format_ok", "truncated")


def _unpack_group(arrays: tuple[np.ndarray, ...], lengths: np.ndarray, scalars: tuple[list, ...]) -> RolloutGroup:
    """The group RolloutGroup.__reduce__ packed; each rollout's arrays are views of the packed ones. Built as pickle
    builds a dataclass (a new object, then its fields), at a third of the cost of 32 frozen-dataclass __init__s."""
    prompts, responses, logps, versions = arrays
    rollouts = []
    p0 = r0 = 0
    for (P, R), values in zip(lengths.tolist(), zip(*scalars)):
        rollout = object.__new__(Rollout)
        rollout.__dict__.update(zip(_SCALAR_FIELDS, values))
        rollout.__dict__.update(prompt_tokens=prompts[p0 : p0 + P], response_tokens=responses[r0 : r0 + R],
                                sampler_logp=logps[r0 : r0 + R], versions=versions[r0 : r0 + R])
        rollouts.append(rollout)
        p0, r0 = p0 + P, r0 + R
    return RolloutGroup(tuple(rollouts))
