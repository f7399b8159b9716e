"""Shared-prompt layout (hardware.trainer_shared_prompts): a group's prompt runs through the model once.

A GRPO-style step holds n responses to each prompt. As one row per response, the prompt's tokens go through every
layer n times. Here the step is two arrays: each distinct prompt once (prompts_GP) and its responses
(responses_GNT). Every layer runs its norms and MLP over all these tokens; in attention a prompt attends causally to
itself, and a response to its prompt's keys and its own earlier tokens, at positions that continue the prompt's
(logprobs.py `shared_prompt_hidden`). So every hidden state equals the one-row-per-response forward's (up to float
rounding), with the prompt's tokens computed once per prompt instead of once per response.

The log-prob of token t of response b is read from the hidden state that predicts it: the prompt's last position
for a response's first token, the token before it otherwise. `source_BL` holds that index for every position of
the usual [B, L] layout, so log-probs come back in that layout and the objectives see the same arrays as before.
"""

from __future__ import annotations

from typing import Any, Sequence

import equinox as eqx
import numpy as np

# shortest padded prompt / response length: a prompt and a response are each a fraction of a row, so the rows'
# minimum (32, training/batch.py) would pad a 10-token prompt 3x
MIN_PART_BUCKET = 8


class SharedPromptRows(eqx.Module):
    """A step in the shared-prompt layout: NumPy arrays on the host, JAX arrays in the step.

    Flat token order (what `source_BL` indexes): prompts_GP row-major, then responses_GNT row-major.
    """

    prompts_GP: Any  # int32: each distinct prompt once, right-padded
    prompt_lens_G: Any  # int32: its real length (0 on padding groups)
    responses_GNT: Any  # int32: the responses to prompt g, right-padded
    source_BL: Any  # int32[B, L]: flat index of the hidden state that predicts token [b, l] (0 where none does)


def row_members(prompts: Sequence[Sequence[int]], max_responses: int) -> list[list[int]]:
    """Responses per prompt group, in order of first appearance: responses with the same prompt tokens share a group
    of at most `max_responses` (rollout.n_generations: two groups of one problem in a step stay two groups, so every
    group's response slots stay n)."""
    groups: list[list[int]] = []
    open_group: dict[tuple[int, ...], int] = {}  # prompt -> index of its group that still has room
    for b, prompt in enumerate(prompts):
        key = tuple(int(t) for t in prompt)
        g = open_group.get(key)
        if g is None or len(groups[g]) >= max_responses:
            groups.append([])
            g = open_group[key] = len(groups) - 1
        groups[g].append(b)
    return groups


def shared_prompt_rows(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    members_G: Sequence[Sequence[int]],
    batch_shape: tuple[int, int],
    shape_GNPT: tuple[int, int, int, int],
    pad_id: int,
) -> SharedPromptRows:
    """Responses b (prompts[b] + responses[b] is row b of the [B, L] layout) laid out with their prompt once:
    members_G[g] (from `row_members`) answer prompt g; G groups of N responses, prompts of P and responses of T
    tokens at most (padding groups, responses and tokens are never read)."""
    G, N, P, T = shape_GNPT
    if len(members_G) > G or max(map(len, members_G)) > N:
        raise ValueError(f"{len(members_G)} prompts of up to {max(map(len, members_G))} responses exceed {G} x {N}")
    prompts_GP = np.full((G, P), pad_id, np.int32)
    prompt_lens = np.zeros(G, np.int32)
    responses_GNT = np.full((G, N, T), pad_id, np.int32)
    source = np.zeros(batch_shape, np.int32)
    for g, members in enumerate(members_G):
        prompt = np.asarray(prompts[members[0]], np.int32)
        p = len(prompt)
        prompts_GP[g, :p] = prompt
        prompt_lens[g] = p
        for k, b in enumerate(members):
            response = np.asarray(responses[b], np.int32)
            n = len(response)
            responses_GNT[g, k, :n] = response
            start = G * P + (g * N + k) * T  # flat index of this response's first token
            source[b, 1:p] = g * P + np.arange(p - 1)  # prompt token t: predicted at t - 1
            if n:  # the first response token: at the prompt's last position; then each at the one before it
                source[b, p] = g * P + p - 1
                source[b, p + 1 : p + n] = start + np.arange(n - 1)
    return SharedPromptRows(prompts_GP, prompt_lens, responses_GNT, source)
