"""`chain`: repeated addition with a worked chain, so harder items need longer answers.

"27+4 x5" -> "27+4=31;31+4=35;35+4=39;39+4=43;43+4=47;#47". Every step is 8 characters and items take 1 to 12 steps,
so answers run from 11 to 99 characters: lengths differ by an order of magnitude within a batch, the setting where
token-mean and per-example loss normalisation weigh answers differently. Values stay two-digit, so prompt and
answer fit a 128-token context. Only the number after the last `#` is graded; the chain is how a small model gets
there (one wrong step spoils the rest).
"""

from __future__ import annotations

import re

import numpy as np

CHAIN_MIN_START, CHAIN_MAX_VALUE = 10, 99  # every value of the chain stays in 10..99
CHAIN_MIN_STEP, CHAIN_MAX_STEP = 2, 9  # the amount added at every step
CHAIN_MIN_TIMES, CHAIN_MAX_TIMES = 1, 12  # steps in the chain: the item's difficulty
CHAIN_LEVEL_WIDTH = 4  # steps per difficulty label (1-4, 5-8, 9-12)
CHAIN_FORMAT = re.compile(r"(\d+\+\d+=\d+;)+#\d+")  # a well-formed worked chain
_FINAL = re.compile(r"#\s*(\d+)\s*$")


def _largest_step(times: int) -> int:
    """The largest step that keeps a chain of `times` steps from a start of CHAIN_MIN_START within CHAIN_MAX_VALUE."""
    return min(CHAIN_MAX_STEP, (CHAIN_MAX_VALUE - CHAIN_MIN_START) // times)


def chain_response(start: int, step: int, times: int) -> str:
    """The worked chain: one `a+d=b;` per step, then `#` and the final value."""
    values = [start + step * i for i in range(times + 1)]
    return "".join(f"{a}+{step}={b};" for a, b in zip(values, values[1:])) + f"#{values[-1]}"


def draw_chain(rng: np.random.Generator) -> tuple[str, str]:
    """(question, worked chain): the number of steps first (uniform, so every length is as common), then a step
    and a start that keep the chain two-digit."""
    times = int(rng.integers(CHAIN_MIN_TIMES, CHAIN_MAX_TIMES + 1))
    step = int(rng.integers(CHAIN_MIN_STEP, _largest_step(times) + 1))
    start = int(rng.integers(CHAIN_MIN_START, CHAIN_MAX_VALUE - step * times + 1))
    return f"{start}+{step} x{times}", chain_response(start, step, times)


def chain_final_answer(text: str) -> str | None:
    """The number after the response's last `#` (what is graded), or None when the response has no final answer."""
    match = _FINAL.search(text.strip())
    return match.group(1) if match else None


def chain_level(worked: str) -> str:
    """Difficulty label by the number of steps: `steps_01-04`, `steps_05-08` or `steps_09-12` (per-level pass@1)."""
    low = (worked.count(";") - 1) // CHAIN_LEVEL_WIDTH * CHAIN_LEVEL_WIDTH + 1
    return f"steps_{low:02d}-{low + CHAIN_LEVEL_WIDTH - 1:02d}"


def chain_space_size() -> int:
    """Distinct (start, step, times) problems the draw can produce."""
    return sum(
        CHAIN_MAX_VALUE - step * times - CHAIN_MIN_START + 1
        for times in range(CHAIN_MIN_TIMES, CHAIN_MAX_TIMES + 1)
        for step in range(CHAIN_MIN_STEP, _largest_step(times) + 1)
    )
