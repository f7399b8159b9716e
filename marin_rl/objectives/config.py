"""The `loss:` config node: which RL objective to optimise and how (one pydantic model, validated once).

Each field maps onto one pure function of marin_rl.objectives; conf/loss/*.yaml are the named presets and
docs/objectives.md tabulates them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from marin_rl.config.strict import StrictModel

AdvantageEstimator = Literal["grpo", "dr_grpo", "rloo"]
AggregationMode = Literal[
    "token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "token_sum", "batch_scaled_token_mean"
]


class TruncatedISConfig(StrictModel):
    """Truncated importance sampling between sampler and trainer log-probs (Yao et al. 2025).

    Applies only with ratio_baseline=recompute: with ratio_baseline=sampler the PPO ratio already is
    pi_theta / pi_sampler and the weight is 1.
    """

    enabled: bool = True
    level: Literal["token", "sequence"] = "token"
    cap: float = Field(2.0, gt=0.0)  # weights are min(pi_old / pi_sampler, cap)


class MaskedISConfig(StrictModel):
    """Masked importance sampling: drop tokens or answers whose ratio pi_old / pi_sampler leaves [low, high].

    Applies only with ratio_baseline=recompute (with sampler the ratio is 1 by construction: refused).
    """

    enabled: bool = False
    level: Literal["token", "sequence", "geometric"] = "token"
    low: float = Field(0.5, gt=0.0)  # keep ratios >= low
    high: float = Field(2.0, gt=0.0)  # keep ratios <= high

    @model_validator(mode="after")
    def _band(self) -> "MaskedISConfig":
        if not self.low < 1.0 < self.high:
            raise ValueError(f"loss.mis band [{self.low}, {self.high}] must contain 1 (low < 1 < high)")
        return self


class KLConfig(StrictModel):
    """Penalty KL(pi_theta || pi_ref) to a frozen reference policy (the initial weights); coef 0 = off."""

    coef: float = Field(0.0, ge=0.0)
    kind: Literal["k1", "k2", "k3"] = "k3"  # Schulman 2020 estimators, see objectives/kl.py


class OverlongConfig(StrictModel):
    """DAPO soft overlong punishment (Yu et al. 2025, sec. 3.4) and overlong filtering.

    The penalty's L_max is sampler.max_new_tokens; buffer_len must not exceed it.
    """

    penalty: bool = False  # add overlong_penalty(length) to the reward
    buffer_len: int = Field(16, ge=0)  # the penalty ramps 0 -> -factor over the last buffer_len tokens
    factor: float = Field(1.0, ge=0.0)  # penalty at (and beyond) the cap
    filter_truncated: bool = False  # mask out answers that hit the cap (they count for nothing)


class DynamicSamplingConfig(StrictModel):
    """DAPO dynamic sampling (Yu et al. 2025, sec. 3.2): refill the batch after zero-variance filtering."""

    enabled: bool = False
    max_extra_rounds: int = Field(3, ge=0)  # sampling rounds after the first before training on a short batch


class LossConfig(StrictModel):
    name: str
    advantage: AdvantageEstimator = "grpo"
    ratio_level: Literal["token", "sequence"] = "token"  # sequence = GSPO (Zheng et al. 2025)
    ratio_baseline: Literal["sampler", "recompute"] = "sampler"  # old log-probs: the sampler's, or recomputed
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_eps_high: float = Field(0.28, ge=0.0)
    aggregation: AggregationMode = "token_mean"
    fixed_budget: int | None = Field(None, gt=0)  # L_max of seq_mean_token_sum_norm
    tis: TruncatedISConfig = TruncatedISConfig()
    mis: MaskedISConfig = MaskedISConfig()
    kl: KLConfig = KLConfig()
    entropy_coef: float = 0.0  # loss -= entropy_coef * agg(entropy)
    filter_zero_variance: bool = True  # drop groups whose rewards are all equal before building the batch
    dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig()
    overlong: OverlongConfig = OverlongConfig()

    @model_validator(mode="after")
    def _cross_field_checks(self) -> "LossConfig":
        if self.mis.enabled and self.ratio_baseline != "recompute":
            raise ValueError(
                "loss.mis.enabled=true needs loss.ratio_baseline=recompute: with ratio_baseline=sampler the old "
                "policy is the sampler, every ratio pi_old / pi_sampler is 1 and nothing is masked"
            )
        if self.aggregation == "seq_mean_token_sum_norm" and self.fixed_budget is None:
            raise ValueError(
                "loss.fixed_budget must be set (a token count, e.g. the max response length) "
                "when loss.aggregation=seq_mean_token_sum_norm"
            )
        if self.dynamic_sampling.enabled and not self.filter_zero_variance:
            raise ValueError(
                "loss.dynamic_sampling.enabled=true refills groups dropped by zero-variance filtering; "
                "it needs loss.filter_zero_variance=true"
            )
        return self
