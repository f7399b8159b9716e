"""Checks on a generate() call that every sampler backend makes the same way (same messages, same limits)."""

from __future__ import annotations

from collections.abc import Sequence

from marin_rl.inference.types import SampleRequest


def normalize_prompts(prompts, n: int, vocab_size: int) -> tuple[list[list[int]], list[int]]:
    """(token lists, generations per prompt); SampleRequests carry their own n. Empty or out-of-vocab prompts fail."""
    if len(prompts) == 0:
        raise ValueError("generate: prompts is empty")
    out, counts = [], []
    for i, p in enumerate(prompts):
        toks, c = (list(p.prompt_tokens), int(p.n)) if isinstance(p, SampleRequest) else (list(p), int(n))
        if c < 1:
            raise ValueError(f"prompt {i}: n={c} generations must be >= 1")
        if not toks:
            raise ValueError(f"prompt {i} is empty: a prompt needs at least one token (e.g. BOS)")
        bad = [t for t in toks if not (0 <= int(t) < vocab_size)]
        if bad:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): {bad[:5]}")
        out.append([int(t) for t in toks])
        counts.append(c)
    return out, counts


def check_generation(prompts: Sequence[Sequence[int]], temperature: float, max_new: int, max_seq_len: int) -> None:
    """temperature >= 0, max_new >= 1, and every prompt + max_new fits the context."""
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 = greedy)")
    if max_new < 1:
        raise ValueError(f"max_new_tokens={max_new} must be >= 1")
    for i, p in enumerate(prompts):
        if len(p) + max_new > max_seq_len:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new} it needs {len(p) + max_new} "
                f"slots > max_seq_len={max_seq_len} (shorten the prompt or lower max_new_tokens)"
            )
