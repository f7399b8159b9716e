"""The RL objective as small pure JAX functions (jit/grad-traceable, NumPy inputs accepted), one idea per module.

advantages     group_advantages, batch_group_advantages, advantage_metrics        (rollout side)
filtering      zero_variance_groups, GroupAccounting, select_batch_groups, mask_truncated   (rollout side)
shaping        overlong_penalty, apply_overlong_penalty                            (rollout side)
aggregation    aggregate_loss, Normalizer, batch_normalizer, aggregate_with_normalizer
surrogates     clipped_surrogate, gspo_ratio, token_ratio
importance     truncated_is_weights
kl             kl_estimate
entropy        chunked_entropy, entropy_from_logits
loss           policy_loss (everything above assembled per the `loss:` config)
sampling_checks  warn_if_greedy
See docs/objectives.md for which preset uses which piece.
"""

from marin_rl.objectives.advantages import (
    ADVANTAGE_ESTIMATORS,
    advantage_metrics,
    batch_group_advantages,
    group_advantages,
)
from marin_rl.objectives.aggregation import (
    AGGREGATION_MODES,
    Normalizer,
    aggregate_loss,
    aggregate_with_normalizer,
    batch_normalizer,
    masked_sequence_mean,
    masked_token_mean,
)
from marin_rl.objectives.config import LossConfig
from marin_rl.objectives.entropy import chunked_entropy, entropy_from_logits
from marin_rl.objectives.filtering import (
    GroupAccounting,
    filtered_fraction,
    mask_truncated,
    select_batch_groups,
    zero_variance_groups,
)
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
    "aggregate_loss",
    "aggregate_with_normalizer",
    "apply_overlong_penalty",
    "batch_group_advantages",
    "batch_normalizer",
    "chunked_entropy",
    "clip_indicators",
    "clipped_surrogate",
    "entropy_from_logits",
    "filtered_fraction",
    "greedy_reasons",
    "group_advantages",
    "gspo_ratio",
    "kl_estimate",
    "mask_truncated",
    "masked_sequence_mean",
    "masked_token_mean",
    "overlong_penalty",
    "policy_loss",
    "select_batch_groups",
    "token_ratio",
    "truncated_is_clipped",
    "truncated_is_weights",
    "warn_if_greedy",
    "zero_variance_groups",
]
