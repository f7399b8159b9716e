"""The pieces of one sampler wave around the device loop: prompt packing, and each row's host-side state.

A wave is up to `max_batch` rows decoded together. Before the loop, `pack_prompts` lays the prompts into a fixed
[B, S] buffer (left-padded so that every prompt ends at the same slot); after each decode chunk, `WaveRows.absorb`
moves the chunk's tokens, log-probs and versions into per-row lists and decides which rows are finished.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from marin_rl.inference.stops import first_stop
from marin_rl.inference.types import Completion, FinishReason


@dataclass(frozen=True)
class PackedPrompts:
    tokens_BS: np.ndarray  # int32: prompt r in slots [prompt_end - len(r), prompt_end), pad elsewhere
    pad_B: np.ndarray  # int32: left padding of each row (prompt_end - 1 for bucket fillers)
    done_B: np.ndarray  # bool: True for bucket filler rows, which never generate
    prompt_end: int  # first generated token goes to this slot, in every row


def pack_prompts(prompts: Sequence[Sequence[int]], batch_bucket: int, max_seq_len: int, pad_id: int) -> PackedPrompts:
    """Left-pad each prompt so all end at slot P = the longest prompt; rows past len(prompts) are fillers."""
    P = max(len(p) for p in prompts)
    tokens_BS = np.full((batch_bucket, max_seq_len), pad_id, np.int32)
    pad_B = np.full((batch_bucket,), P - 1, np.int32)
    done_B = np.zeros((batch_bucket,), bool)
    done_B[len(prompts):] = True
    for r, p in enumerate(prompts):
        tokens_BS[r, P - len(p) : P] = p
        pad_B[r] = P - len(p)
    return PackedPrompts(tokens_BS, pad_B, done_B, P)


@dataclass
class WaveRequest:
    prompts: list[list[int]]
    prompt_index: list[int]  # which generate() prompt each row answers
    max_new: int
    on_chunk: Callable[[int], None] | None  # called between chunks; weights set from it apply to the next one
    last: bool  # the last wave of a generate() call: no on_chunk after its final chunk


@dataclass
class WaveProgress:
    """Counters over all waves of one generate() call."""

    chunks: int = 0
    row_steps: int = 0  # decoded rows x decode steps, finished rows included
    swaps: int = 0  # weight swaps applied between chunks


@dataclass
class WaveRows:
    """Per-row host state of a wave: what each row generated so far and why it finished."""

    n: int
    max_new: int
    stop: Sequence[str]
    decode_text: Callable[[Sequence[int]], str]
    tokens: list[list[int]] = field(init=False)
    logprobs: list[list[float]] = field(init=False)
    sampling_logprobs: list[list[float]] = field(init=False)
    versions: list[list[int]] = field(init=False)
    reason: list[FinishReason | None] = field(init=False)
    checked: list[int] = field(init=False)  # tokens already scanned for stop strings

    def __post_init__(self) -> None:
        self.tokens, self.logprobs = [[] for _ in range(self.n)], [[] for _ in range(self.n)]
        self.sampling_logprobs, self.versions = [[] for _ in range(self.n)], [[] for _ in range(self.n)]
        self.reason, self.checked = [None] * self.n, [0] * self.n

    @property
    def all_finished(self) -> bool:
        return all(r is not None for r in self.reason)

    def absorb(self, out, version: int, batch_bucket: int) -> np.ndarray:
        """Take one chunk's output ([steps, B] arrays) under weights `version`; returns bool[B], True for rows a
        stop string ended in this chunk (the device still thinks they run)."""
        stopped_B = np.zeros((batch_bucket,), bool)
        for r in range(self.n):
            if self.reason[r] is not None:
                continue
            produced = np.nonzero(out.active[:, r])[0]
            if len(produced) == 0:
                continue
            self.tokens[r].extend(out.tokens[produced, r].tolist())
            self.logprobs[r].extend(out.logprobs[produced, r].tolist())
            self.sampling_logprobs[r].extend(out.sampling_logprobs[produced, r].tolist())
            self.versions[r].extend([version] * len(produced))
            cut = first_stop(self.tokens[r], self.checked[r], self.stop, self.decode_text)
            self.checked[r] = len(self.tokens[r])
            if cut is not None:
                for values in (self.tokens[r], self.logprobs[r], self.sampling_logprobs[r], self.versions[r]):
                    del values[cut:]
                self.reason[r] = "stop"
                stopped_B[r] = True
            elif out.hit_eos[:, r].any():
                self.reason[r] = "stop"
            elif len(self.tokens[r]) >= self.max_new:
                self.reason[r] = "length"
        return stopped_B

    def completions(self, prompt_index: list[int]) -> list[Completion]:
        return [
            Completion(
                prompt_index=prompt_index[r], tokens=self.tokens[r], logprobs=self.logprobs[r],
                versions=self.versions[r], finish_reason=self.reason[r],  # type: ignore[arg-type]
                sampling_logprobs=self.sampling_logprobs[r],
            )
            for r in range(self.n)
        ]
