"""The RL objective as small pure JAX functions (jit/grad-traceable, NumPy inputs accepted), one idea per module.

Data side (run by marin_rl.training.data_processing.prepare_batch on the trainer, when a group is used):
shaping        overlong_penalty, apply_overlong_penalty       rewards -> shaped rewards
advantages     batch_group_advantages, advantage_metrics      shaped rewards -> group-relative advantages
filtering      zero_variance_groups, GroupAccounting, mask_truncated   which groups and tokens count

Loss side (run inside the jitted train step, marin_rl.training.trainer):
aggregation    Normalizer, batch_normalizer, aggregate_with_normalizer, masked_token_mean, masked_sequence_mean
surrogates     clipped_surrogate, clip_indicators, gspo_ratio, token_ratio
importance     truncated_is_weights, truncated_is_clipped
kl             kl_estimate
loss           policy_loss (the loss-side pieces assembled per the `loss:` config)

sampling_checks  warn_if_greedy (at launch)
See docs/objectives.md for which preset uses which piece.
"""

from marin_rl.objectives.advantages import ADVANTAGE_ESTIMATORS, advantage_metrics, batch_group_advantages
from marin_rl.objectives.aggregation import (
    AGGREGATION_MODES,
    Normalizer,
    aggregate_with_normalizer,
    batch_normalizer,
    masked_sequence_mean,
    masked_token_mean,
)
from marin_rl.objectives.config import LossConfig
from marin_rl.objectives.filtering import GroupAccounting, mask_truncated, zero_variance_groups
from marin_rl.objectives.importance import truncated_is_clipped, truncated_is_weights
from marin_rl.objectives.kl import KL_KINDS, kl_estimate
from marin_rl.objectives.loss import policy_loss
from marin_rl.objectives.sampling_checks import GreedySamplingWarning, greedy_reasons, warn_if_greedy
from marin_rl.objectives.shaping import apply_overlong_penalty, overlong_penalty
from marin_rl.objectives.surrogates import clip_indicators, clipped_surrogate, gspo_ratio, token_ratio

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "KL_KINDS",
    "GreedySamplingWarning",
    "GroupAccounting",
    "LossConfig",
    "Normalizer",
    "advantage_metrics",
    "aggregate_with_normalizer",
    "apply_overlong_penalty",
    "batch_group_advantages",
    "batch_normalizer",
    "clip_indicators",
    "clipped_surrogate",
    "greedy_reasons",
    "gspo_ratio",
    "kl_estimate",
    "mask_truncated",
    "masked_sequence_mean",
    "masked_token_mean",
    "overlong_penalty",
    "policy_loss",
    "token_ratio",
    "truncated_is_clipped",
    "truncated_is_weights",
    "warn_if_greedy",
    "zero_variance_groups",
]
