"""The `hardware.inference_backend=vllm` sampler: the Levanter sampler's contract, served by a vLLM engine.

Why a child process: vLLM needs its own environment (.venv-vllm: torch and transformers 5.x, which Levanter's
environment cannot hold), so each rollout worker starts `marin_rl.inference.vllm_server` with that interpreter and
talks to it over the child's stdin/stdout (marin_rl/inference/vllm_protocol.py: no socket, nothing to authenticate).
A Ray actor with the other interpreter would need Ray and this project installed twice, pinned alike; a pipe to a
child keeps the worker's sampler one object with the same methods as marin_rl.inference.sampler.Sampler.

The contract, as the Levanter sampler's:
- prompts are token ids, tokenised once by the project (the engine has no tokenizer);
- every completion carries tokens, log-probs at the sampling temperature (vLLM's processed log-probs: with top-k or
  top-p on, that is the truncated distribution's log-prob, which this backend also reports as `logprobs`), the
  finish reason and each token's policy version; EOS ids stop on the engine, `sampler.stop` strings here, between
  chunks (the stopping token is kept, as with the Levanter sampler);
- `set_weights(model, version)` queues weights; they are copied into the engine in place (HF tensor names, the same
  mapping as the export) at the next chunk boundary of a generation in progress, or before the next one. With
  kv_on_swap=recompute the sequences in flight are re-prefilled under the new weights (each token's log-prob is then
  its recorded version's); with keep they continue on the old KV cache;
- `reseed(seed)` fixes the per-row sampling seeds of the next calls.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from marin_rl.config.paths import PROJECT_ROOT
from marin_rl.config.seeds import derive_seed
from marin_rl.inference import vllm_protocol as proto
from marin_rl.inference.requests import check_generation, normalize_prompts
from marin_rl.inference.sampler import KV_ON_SWAP
from marin_rl.inference.stops import eos_token_ids, first_stop
from marin_rl.inference.types import Completion, SampleRequest
from marin_rl.inference.vllm_env import vllm_python

if TYPE_CHECKING:
    from marin_rl.config.spec import SamplerConfig, VllmConfig

logger = logging.getLogger(__name__)



class _Row:
    """One response being generated: tokens, log-probs and versions so far."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.finish: str | None = None
        self.checked = 0  # tokens already searched for a stop string


class VllmSampler:
    """Samples completions from a vLLM engine process; the interface of marin_rl.inference.sampler.Sampler."""

    def __init__(
        self,
        model,
        tokenizer,
        sampler_cfg: "SamplerConfig",
        max_seq_len: int,
        vllm_cfg: "VllmConfig",
        workdir: str | Path,
        *,
        version: int = 0,
        seed: int = 0,
        kv_on_swap: str = "recompute",
        dtype: str = "float32",
    ):
        from marin_rl.models.hf_io import export_hf, hf_state_dict

        if kv_on_swap not in KV_ON_SWAP:
            raise ValueError(f"kv_on_swap={kv_on_swap!r} is not allowed; allowed: {list(KV_ON_SWAP)}")
        self.cfg = sampler_cfg
        self.tokenizer = tokenizer
        self.max_seq_len = int(max_seq_len)
        self.kv_on_swap = kv_on_swap
        self.vocab_size = model.Vocab.size
        self.eos_ids = eos_token_ids(tokenizer)
        self._seed = int(seed)
        self._calls = 0
        self._version = int(version)
        self._pending: tuple[list[np.ndarray], int] | None = None
        self._weights_lock = threading.Lock()
        self._generate_lock = threading.Lock()
        self.names = list(hf_state_dict(model))
        self.compile_events: list[str] = []
        self.last_stats: dict[str, float] = {}
        self.load_seconds: list[float] = []  # seconds of each in-place weight update

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        model_dir = export_hf(model, tokenizer, self.workdir / "model", dtype=dtype, overwrite=True)
        self._stderr = open(self.workdir / "engine.log", "ab")
        # nobind: vLLM's CPU backend otherwise pins its threads to fixed cores, and on a machine whose cores it
        # shares with the trainer (and whatever else runs) a pinned thread waits behind them instead of migrating
        env = dict(os.environ, PYTHONPATH=str(PROJECT_ROOT), VLLM_CPU_OMP_THREADS_BIND="nobind")
        env.pop("JAX_PLATFORMS", None)
        self._proc = subprocess.Popen(
            [vllm_python(vllm_cfg), "-m", "marin_rl.inference.vllm_server"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=str(self.workdir), env=env,
        )
        reply = self._call({
            "op": "start", "model_dir": str(model_dir), "dtype": dtype, "max_model_len": self.max_seq_len,
            "max_num_seqs": vllm_cfg.max_num_seqs, "memory_fraction": vllm_cfg.memory_fraction,
            "seed": derive_seed(seed, "vllm-engine"),
        })
        self.start_seconds = reply["seconds"]
        self.compile_events.append(f"vLLM {reply['vllm']} engine started in {reply['seconds']:.1f}s")
        logger.info("sampler: %s", self.compile_events[-1])

    # ------------------------------------------------------------------ process

    def _call(self, message: dict) -> dict:
        self._send(message)
        return self._receive()

    def _send(self, message: dict) -> None:
        try:
            proto.send(self._proc.stdin, message)
        except (BrokenPipeError, OSError) as err:
            raise proto.EngineProcessError(self._died(f"cannot write to the vLLM engine ({err})")) from err

    def _receive(self) -> dict:
        try:
            reply = proto.receive(self._proc.stdout)
        except proto.EngineProcessError as err:
            raise proto.EngineProcessError(self._died(str(err))) from err
        if reply.get("ok") is False:
            raise proto.EngineProcessError(f"vLLM engine: {reply['error']} (log: {self.workdir / 'engine.log'})")
        return reply

    def _died(self, what: str) -> str:
        code = self._proc.poll()
        return f"{what}; exit code {code}; the engine's log: {self.workdir / 'engine.log'}"

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._call({"op": "shutdown"})
                self._proc.wait(timeout=30)
            except (proto.EngineProcessError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._stderr.close()

    def __del__(self):  # a worker that dies without close() must not leave its engine behind
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    @property
    def weight_devices(self) -> int:
        """The engine runs on one device (tensor_parallel_size 1; the spec refuses a larger rollout mesh)."""
        return 1

    # ------------------------------------------------------------------ weights

    @property
    def version(self) -> int:
        with self._weights_lock:
            return self._pending[1] if self._pending is not None else self._version

    def reseed(self, seed: int) -> None:
        self._seed, self._calls = int(seed), 0

    def set_weights(self, model, version: int, lent: bool = False) -> None:
        """Queue new weights (same shapes) for the next chunk boundary; thread-safe; the latest call wins.
        lent: `model`'s arrays may alias memory reused once this returns (a shared-memory slot): they are copied."""
        from marin_rl.models.hf_io import hf_state_dict

        state = hf_state_dict(model)
        if list(state) != self.names:
            raise ValueError("set_weights: the new model's parameter names differ from the engine's model")
        host = np.array if lent else np.ascontiguousarray  # np.array always copies (C order)
        with self._weights_lock:
            self._pending = ([host(state[k]) for k in self.names], int(version))

    def _take_pending(self) -> tuple | None:
        """(names, arrays, version) for the engine, if weights are queued; the queued version becomes current."""
        with self._weights_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return None
        arrays, version = pending
        self._version = version
        return self.names, arrays, version

    def _load_between_generations(self) -> None:
        weights = self._take_pending()
        if weights is not None:
            reply = self._call({"op": "load_weights", "names": weights[0], "arrays": weights[1],
                                "version": weights[2]})
            self.load_seconds.append(reply["seconds"])

    # ------------------------------------------------------------------ generation

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[SampleRequest],
        n: int = 1,
        *,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
        key: Any = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """n completions of each prompt, as [prompt][n]; see marin_rl.inference.sampler.Sampler.generate."""
        if key is not None:
            raise ValueError("the vLLM sampler takes its randomness from reseed(seed), not a JAX key")
        prompt_list, counts = normalize_prompts(prompts, n, self.vocab_size)
        temperature = self.cfg.temperature if temperature is None else float(temperature)
        max_new = self.cfg.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        check_generation(prompt_list, temperature, max_new, self.max_seq_len)
        index = [(pi, j) for pi, c in enumerate(counts) for j in range(c)]
        call = self._calls
        self._calls += 1
        t0 = time.perf_counter()
        with self._generate_lock:
            self._load_between_generations()
            rows, progress = self._run(prompt_list, index, call, temperature, max_new, on_chunk)
        results: list[list[Completion | None]] = [[None] * c for c in counts]
        for r, (pi, j) in enumerate(index):
            row = rows[r]
            results[pi][j] = Completion(
                prompt_index=pi, tokens=row.tokens, logprobs=row.logprobs, versions=row.versions,
                finish_reason=row.finish or "length", sampling_logprobs=list(row.logprobs),
            )
        seconds = time.perf_counter() - t0
        generated = sum(len(r.tokens) for r in rows)
        self.last_stats = {"tokens": generated, "seconds": seconds, "tokens_per_s": generated / max(seconds, 1e-9),
                           **progress}
        return results  # type: ignore[return-value]

    def _run(self, prompts, index, call, temperature, max_new, on_chunk) -> tuple[list[_Row], dict]:
        """The chunk loop: absorb each chunk's tokens, find stop strings, let on_chunk swap weights, reply."""
        greedy = self.cfg.greedy or temperature <= 0.0
        self._send({
            "op": "generate",
            "rows": [(r, prompts[pi], derive_seed(self._seed, "vllm-row", call, r)) for r, (pi, _) in enumerate(index)],
            "temperature": temperature, "top_k": self.cfg.top_k, "top_p": self.cfg.top_p, "greedy": greedy,
            "max_new": max_new, "eos_ids": self.eos_ids, "decode_chunk": self.cfg.decode_chunk,
            "kv_on_swap": self.kv_on_swap,
        })
        rows = [_Row() for _ in index]
        chunks, swaps = 0, 0
        version = self._version  # weights of the chunk being decoded
        while True:
            event = self._receive()
            if event.get("load_seconds"):
                self.load_seconds.append(event["load_seconds"])
            stopped = self._absorb(rows, event["delta"], version)
            chunks += 1
            if event["done"]:
                break
            if on_chunk is not None:
                on_chunk(chunks)
            weights = self._take_pending()
            swaps += weights is not None
            version = self._version
            self._send({"op": "continue", "stop_rows": stopped, "weights": weights})
        return rows, {"chunks": chunks, "swaps": swaps, "engine_steps": event["steps"]}

    def _absorb(self, rows: list[_Row], delta: dict, version: int) -> list[int]:
        """Append a chunk's tokens (all produced by `version`); rows that hit a stop string end there."""
        stopped = []
        for r, (tokens, logprobs, finish) in delta.items():
            row = rows[r]
            if row.finish is not None:  # stopped by a stop string in an earlier chunk; the engine had more queued
                continue
            row.tokens.extend(tokens)
            row.logprobs.extend(logprobs)
            row.versions.extend([version] * len(tokens))
            row.finish = finish
            cut = first_stop(row.tokens, row.checked, self.cfg.stop, self._decode_text)
            row.checked = len(row.tokens)
            if cut is not None:
                del row.tokens[cut:], row.logprobs[cut:], row.versions[cut:]
                if row.finish is None:
                    stopped.append(r)
                row.finish = "stop"
        return stopped

    def _decode_text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

