"""rollout.mode=one_step_off: sampling pipelined with training, exactly one step behind.

While the trainer trains step s - 1, the rollout workers already sample the batch of step s with the weights the
trainer started step s - 1 from: the batch of step s is sampled with weights w(s) = max(s - 2, b), where b is the
version the run (or its resume) started from. So every step after the first trains on rollouts exactly one step
old (staleness 1, recorded per token as in the other modes), and the workers never run further ahead.

The batch of step s is sampled once the trainer has drawn the batch of step s - 1 (all of it, extra rounds
included), that is, while it trains step s - 1. Nothing here depends on timing, so a run reproduces from its seed
like a sync run:
- a worker samples a round with exactly the weights w(s), fetched by version (the coordinator keeps the newest two);
- a round's stream is named by the step it is for; when the trainer draws step s, the buffer holds step s's groups
  only (the next step's are not started yet), and every round it counts in that step's metrics is step s's;
- dynamic-sampling extra rounds of step s are sampled with w(s) too (same staleness as the batch they fill), named
  by (w(s), index) like sync mode's, whichever worker claims them; the workers are idle then, so the trainer never
  waits for another step's round to finish.

A resumed run restarts the pipeline from the restored weights (its first step trains at staleness 0): it does not
reproduce the uninterrupted run, which had trained that step on the previous version's rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE = "one_step_off"
VERSION_LAG = {"sync": 0, "inflight": 0, MODE: 1}  # how far behind the newest weights a batch's weights are meant to be


def batch_weights_version(step: int, base_version: int) -> int:
    """w(s) = max(s - 2, b): the weights the batch of `step` is sampled with."""
    return max(step - 2, base_version)


@dataclass(frozen=True)
class LaggedRound:
    n_groups: int
    stream: tuple  # names the round's prompts and sampling key (marin_rl.config.seeds)
    weights_version: int  # sampled with exactly these weights
    step: int | None  # the step whose share this round is; None for a dynamic-sampling extra round


def next_lagged_round(
    *, next_step: int, drawn_step: int, base_version: int, last_step: int, extra: tuple[int, int, int] | None,
    worker_id: int, incarnation: int, groups_per_round: int,
) -> LaggedRound | None:
    """The worker's next round: an extra round it claimed (the trainer waits on it), else its share of `next_step`
    once the trainer has drawn the batch of the step before (`drawn_step`); None while neither (or once every step
    of the run is sampled)."""
    if extra is not None:
        version, n_groups, index = extra
        return LaggedRound(n_groups, ("extra", version, index), version, None)
    if next_step > last_step or drawn_step < next_step - 1:
        return None
    return LaggedRound(
        groups_per_round, (MODE, worker_id, incarnation, next_step), batch_weights_version(next_step, base_version),
        next_step,
    )
