"""Rollouts -> the dense arrays of one train step: packing, length buckets, padding to the fixed trainer shape.

Row layout (see marin_rl/training/logprobs.py): prompt tokens, then response tokens, right-padded; the loss mask
is 1 on response tokens that count. Rows are padded to a length bucket (32, 48, 64, 96, 128, ...) so a run compiles
a handful of shapes instead of one per longest row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marin_rl.objectives.filtering import mask_truncated
from marin_rl.rollouts import Rollout

MIN_LENGTH_BUCKET = 32  # shortest padded sequence length a step is compiled for
DEFAULT_BUCKETS_PER_OCTAVE = 2  # the 1.5x series (32, 48, 64, 96, ...): the sampler's KV cache grows through it


def length_bucket(
    longest: int, max_seq_len: int, minimum: int = MIN_LENGTH_BUCKET, per_octave: int = DEFAULT_BUCKETS_PER_OCTAVE
) -> int:
    """The smallest bucket >= longest, at most max_seq_len: from m = minimum, `per_octave` evenly spaced lengths per
    doubling (per_octave=2: m, 1.5 m, 2 m, 3 m, ... = 32, 48, 64, 96, ... by default; 4: 32, 40, 48, 56, 64, 80, ...).

    Why more than powers of two: a step's cost is proportional to the padded length, and powers of two alone pad up
    to 2x (a 45-token batch trained as 64); with k lengths per doubling padding stays under 1 + 1/k, for at most k
    times the compiled shapes. The sampler's KV cache grows through the per_octave=2 series (inference/sampler.py).
    """
    power = minimum
    while True:
        for bucket in (power + i * power // per_octave for i in range(per_octave)):
            if bucket >= longest or bucket >= max_seq_len:
                return min(bucket, max_seq_len)
        power *= 2


@dataclass(frozen=True)
class PackedBatch:
    """A training batch as dense right-padded arrays."""

    tokens_BS: np.ndarray  # int32: prompt + response, right-padded
    loss_mask_BS: np.ndarray  # float32: 1 on response tokens that count
    advantages_B: np.ndarray  # float32: one advantage per response
    sampler_logp_BS: np.ndarray  # float32: aligned with tokens (0 off the response)


def pack_rollouts(
    rollouts: list[Rollout], advantages_B: np.ndarray, seq_len: int, pad_id: int, drop_truncated: bool = False
) -> PackedBatch:
    """Lay each response after its prompt in a row of `seq_len`; with `drop_truncated`, truncated rows get no loss."""
    B = len(rollouts)
    tokens = np.full((B, seq_len), pad_id, dtype=np.int32)
    mask = np.zeros((B, seq_len), dtype=np.float32)
    logp = np.zeros((B, seq_len), dtype=np.float32)
    for i, r in enumerate(rollouts):
        p, n = len(r.prompt_tokens), len(r.response_tokens)
        if p + n > seq_len:
            raise ValueError(
                f"rollout {r.problem_id} has {p} prompt + {n} response tokens > model.max_seq_len={seq_len}; "
                "shorten the prompt or lower sampler.max_new_tokens"
            )
        tokens[i, :p] = r.prompt_tokens
        tokens[i, p : p + n] = r.response_tokens
        logp[i, p : p + n] = r.sampler_logp
        mask[i, p : p + n] = 1.0
    if drop_truncated:
        mask = np.asarray(mask_truncated(mask, np.array([r.truncated for r in rollouts], dtype=bool)))
    return PackedBatch(tokens, mask, np.asarray(advantages_B, dtype=np.float32), logp)
