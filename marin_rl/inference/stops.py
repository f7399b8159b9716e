"""Stop strings: matched on the decoded text of a response, between decode chunks (host side).

A response stops at the first token whose decoded prefix contains a stop string; the response keeps that token
(tokens cannot be split; with the char tokenizer the text ends exactly at the end of the match).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def first_stop(
    tokens: Sequence[int], checked: int, stop_strings: Sequence[str], decode: Callable[[Sequence[int]], str]
) -> int | None:
    """Smallest n > checked with a stop string in decode(tokens[:n]); None if none (tokens[:checked] had none)."""
    if not stop_strings or len(tokens) <= checked:
        return None
    if not any(s in decode(tokens) for s in stop_strings):
        return None
    for n in range(checked + 1, len(tokens) + 1):
        text = decode(tokens[:n])
        if any(s in text for s in stop_strings):
            return n
    return None  # unreachable: the full text matched


def eos_token_ids(tokenizer) -> list[int]:
    """The end-of-sequence id(s) of a HF tokenizer (Llama-3-style tokenizers may list several in eos_token_id)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]
