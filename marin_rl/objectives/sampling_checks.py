"""Guard against sampling greedily where RL needs exploration.

Group-relative advantages need the G responses to a prompt to differ; greedy decoding makes them identical, every
group has zero variance and learning stops. A top-k bug that silently forced greedy decoding hurt the system
marin-rl learns from, so the launcher calls `warn_if_greedy` on the training sampler settings.
"""

from __future__ import annotations

import logging
import warnings

logger = logging.getLogger(__name__)

# Below this temperature softmax sampling is argmax in practice (logit gaps of ~0.01 already give odds > e^10).
NEAR_ZERO_TEMPERATURE = 1e-3


class GreedySamplingWarning(UserWarning):
    """Training rollouts are configured to decode (near-)deterministically."""


def greedy_reasons(temperature: float, top_k: int | None, greedy: bool) -> list[str]:
    """The settings that make sampling greedy: temperature ~0, top_k == 1, or the greedy flag (empty if none)."""
    reasons = []
    if greedy:
        reasons.append("greedy=true")
    if temperature is not None and temperature < NEAR_ZERO_TEMPERATURE:
        reasons.append(f"temperature={temperature} (~0)")
    if top_k == 1:
        reasons.append("top_k=1")
    return reasons


def warn_if_greedy(
    temperature: float, top_k: int | None, greedy: bool, context: str = "training"
) -> str | None:
    """Warn (warnings + logging) and return the message when sampling for `context` would be greedy, else None."""
    reasons = greedy_reasons(temperature, top_k, greedy)
    if not reasons:
        return None
    message = (
        f"{context} sampling is greedy ({', '.join(reasons)}): every response to a prompt will be identical, "
        "group advantages will be zero and RL will not learn. Sample with temperature ~1.0, top_k=0 (off), "
        "greedy=false for training rollouts."
    )
    logger.warning(message)
    warnings.warn(message, GreedySamplingWarning, stacklevel=2)
    return message
