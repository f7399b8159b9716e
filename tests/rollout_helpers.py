"""Hand-made rollouts and groups for tests of the buffer, batch packing and batch preparation."""

from __future__ import annotations

import numpy as np

from marin_rl.rollouts import Rollout, RolloutGroup


def rollout(env="a", versions=(0, 0), reward=1.0, prompt=(1, 2), truncated=False, pid="p", length=None) -> Rollout:
    """A rollout of len(versions) response tokens (or `length` tokens, all of version versions[0])."""
    if length is not None:
        versions = (versions[0],) * length
    n = len(versions)
    return Rollout(
        problem_id=pid, env=env, prompt_tokens=np.array(prompt, np.int32),
        response_tokens=np.arange(10, 10 + n, dtype=np.int32), sampler_logp=np.full(n, -0.5, np.float32),
        versions=np.array(versions, np.int32), reward=reward, correct=reward > 0, format_ok=True,
        truncated=truncated,
    )


def group(env="a", versions=(0, 0), rewards=(1.0, 0.0), lengths=None) -> RolloutGroup:
    lengths = lengths or [None] * len(rewards)
    return RolloutGroup(tuple(rollout(env, versions, r, length=n) for r, n in zip(rewards, lengths)))
