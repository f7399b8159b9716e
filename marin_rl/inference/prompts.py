"""Prompt token ids: the one encoder that SFT, RL sampling, evaluation and synthetic data all use.

A policy trained by SFT on one encoding and sampled with another would see prompts it was never trained on, so
there is exactly one way to turn a prompt into tokens.
"""

from __future__ import annotations

from typing import Any

Prompt = str | list[dict[str, str]]  # plain text, or chat messages for chat-template models


def encode_prompt(prompt: Prompt, tokenizer: Any) -> list[int]:
    """<bos> + text for a plain prompt; the tokenizer's chat template with a generation prompt for chat messages."""
    if isinstance(prompt, str):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return [tokenizer.bos_token_id, *ids] if tokenizer.bos_token_id is not None else list(ids)
    return list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True))


def prompt_style(chat_template: bool) -> str:
    """The env render style a model reads: "chat" messages for chat-template models, else "plain" text."""
    return "chat" if chat_template else "plain"


def fit_prompt(ids: list[int], budget: int) -> list[int]:
    """The last `budget` tokens: an over-long prompt is cut from the left, because its end holds the instruction."""
    return ids[-budget:] if budget > 0 else []
