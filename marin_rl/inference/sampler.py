"""The `inference=levanter` sampler: a jitted KV-cache decoder over a Levanter model, with in-flight weight swaps.

Why not Levanter's InferenceEngine (levanter.inference.engine): its sampler knows temperature only (no top-k /
top-p), its decode loop runs `max_rounds` rounds inside one call with the weights closed over for the round, it
does not say which weights produced which token, and on the CPU it falls back to the reference paged attention
(a per-sequence, per-query-token loop). So this module is our own decoder, built from Levanter's modules (see
marin_rl/inference/decoder.py: only the attention kernel is new; embeddings, norms, projections, RoPE, MLP and
LM head are Levanter's own), with the scheduling RL needs:

- batched prompts, n generations each (rows), padded to fixed batch buckets; prompts left-padded so that they
  end at one slot, so prompt lengths never change a compiled shape (compiles are logged: `compile_events`);
- a KV cache that grows with the sequences (slot buckets 64, 96, 128, 192, ... from MIN_CACHE_BUCKET up to
  max_seq_len, the trainer's length-bucket series):
  decode attends over the slots the wave can have written, not over max_seq_len;
- generation in chunks of `sampler_cfg.decode_chunk` decode steps (one jitted while_loop per chunk); between
  chunks `on_chunk(chunks_done)` runs and weights passed to `set_weights` (any thread) take effect;
- every token records the version of the weights that produced it (Completion.versions), every completion its
  version span (min_version / max_version);
- after a swap the sequences in flight continue where they are. kv_on_swap="recompute" (default) rebuilds their
  KV cache from their tokens under the new weights (one prefill pass), so each token's log-prob is exactly
  log pi_{version}(y_t | y_<t) for the version it records; kv_on_swap="keep" continues on the cache written by
  the older weights (PipelineRL / vLLM in-flight behaviour: cheaper, but then a token's distribution mixes the
  new weights with keys/values of the old ones, so its log-prob matches no single policy exactly; on the tiny
  model, after a swap to weights 0.3 std away, "keep" log-probs were 0.6 nats (mean abs) off the new policy,
  about as far as off the old one). With "recompute", an in-flight caller (`on_chunk` given) compiles each chunk
  boundary's refill program when the boundary shape is first reached, so a swap at a shape already reached never
  waits for a compile.

Devices: the sampler runs on a (data, fsdp, model) mesh (`mesh=`, a rollout worker's `hardware.rollout_mesh`;
default one device): weights placed by the trainer's Haliax parameter mapping (heads / MLP width / vocabulary over
`model`, "embed" over `fsdp`), batch rows over data x fsdp, the KV cache split by rows and kv heads
(inference/mesh_placement.py); swaps, versions and log-probs are the same on any mesh.

Log-probs: `Completion.logprobs` = log softmax(logits / T)[token] over the full vocabulary (the trainer's
quantity, compared in tests to marin_rl.training.logprobs.response_logprobs < 1e-4); with top-k/top-p on, the token was
drawn from the truncated renormalised distribution, whose log-prob is `Completion.sampling_logprobs`. Greedy
(temperature 0 or sampler.greedy) takes argmax and reports logprobs at temperature 1. Stops: the tokenizer's EOS
id(s) (on device) and `sampler.stop` strings (host, on the decoded response text, between chunks); the stopping
token is kept and finish_reason is "stop", else "length" after max_new_tokens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from marin_rl.inference import kernels
from marin_rl.inference.decoder import check_supported, init_cache
from marin_rl.inference.mesh_placement import (
    check_model_splits,
    replicated,
    row_split,
    rows_sharding,
    single_device_mesh,
    weight_devices,
)
from marin_rl.inference.requests import check_generation, normalize_prompts
from marin_rl.inference.stops import eos_token_ids
from marin_rl.inference.types import Completion, SampleRequest
from marin_rl.inference.wave import WaveProgress, WaveRequest, WaveRows, pack_prompts
from marin_rl.inference.weight_layout import WeightLayout
from marin_rl.training.batch import length_bucket
from marin_rl.training.mesh import compute_scope

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from marin_rl.config.spec import SamplerConfig

__all__ = ["Completion", "SampleRequest", "Sampler"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 64  # rows (prompts x generations) decoded together when max_batch is not given
MIN_BATCH_BUCKET = 8  # smallest batch shape compiled: fewer rows are padded up to it
# smallest prefill length compiled: fill lengths are powers of two from here up to max_seq_len
MIN_FILL_BUCKET = 16
# smallest KV cache compiled (slots). The cache grows to the next bucket (x1.5 or x4/3: 64, 96, 128, 192, ...) when
# the next chunk needs more slots, up to max_seq_len: each decode step reads the whole cache, which at batch 32
# outweighs the weights (19M params, 256 slots: 100 MB of keys and values against 76 MB of weights per step), so
# reading only the slots in reach is the larger saving (the 1.5x steps over doubling: +2-7% tokens/s at 4M-20M params,
# 128 new tokens, docs/benchmarks.md); each size is one more compiled decode program, hence a floor rather than
# growth from 16.
MIN_CACHE_BUCKET = 64
KV_ON_SWAP = ("recompute", "keep")


def _pow2_bucket(n: int, lo: int, hi: int) -> int:
    """Smallest power of two >= max(n, lo), capped at hi."""
    b = lo
    while b < n:
        b *= 2
    return min(b, hi)


class Sampler:
    """Samples completions from a Levanter Llama-family model; see the module docstring.

    `max_seq_len` bounds prompt + new tokens (the cache size); `max_batch` bounds the rows decoded together
    (more rows run in successive waves); `kv_on_swap` picks what a weight swap does to sequences in flight;
    `mesh` is where weights, KV cache and rows live (default: the first device).
    """

    def __init__(
        self,
        model,
        tokenizer,
        sampler_cfg: "SamplerConfig",
        max_seq_len: int,
        *,
        version: int = 0,
        seed: int = 0,
        max_batch: int | None = None,
        kv_on_swap: Literal["recompute", "keep"] = "recompute",
        compute_dtype: Any = jnp.float32,
        mesh: "Mesh | None" = None,
    ):
        check_supported(model)
        self.mesh = single_device_mesh() if mesh is None else mesh
        check_model_splits(model, self.mesh)
        self._kernels = kernels.kernels_for(self.mesh)
        if kv_on_swap not in KV_ON_SWAP:
            raise ValueError(f"kv_on_swap={kv_on_swap!r} is not allowed; allowed: {list(KV_ON_SWAP)}")
        if max_seq_len < 2:
            raise ValueError(f"max_seq_len={max_seq_len} must be >= 2 (one prompt token + one new token)")
        self.cfg = sampler_cfg
        self.tokenizer = tokenizer
        self.max_seq_len = int(max_seq_len)
        self.max_batch = int(max_batch) if max_batch is not None else DEFAULT_MAX_BATCH
        if self.max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        self.kv_on_swap = kv_on_swap
        self.compute_dtype = jnp.dtype(compute_dtype)
        self._layout = WeightLayout(model, self.mesh, self.compute_dtype)
        self._model = self._layout(model)
        self._version = int(version)
        self._pending: tuple[Any, int] | None = None
        self._weights_lock = threading.Lock()
        self._generate_lock = threading.Lock()
        self._key = jax.random.PRNGKey(seed)
        self.vocab_size = model.Vocab.size
        self.eos_ids = eos_token_ids(tokenizer)
        pad_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad_id) if pad_id is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self.compile_events: list[str] = []
        self._params_seen: dict[tuple[float, int], kernels.DecodeParams] = {}
        self._refills: dict[tuple[int, int, int], Any] = {}  # (rows, length, slots) -> compiled refill program
        self.last_stats: dict[str, float] = {}
        self.load_seconds: list[float] = []  # engine-side weight loads (vLLM's); a swap here is a pointer change

    # ------------------------------------------------------------------ weights

    @property
    def version(self) -> int:
        """Version of the weights the next decode chunk will use (a pending swap included)."""
        with self._weights_lock:
            return self._pending[1] if self._pending is not None else self._version

    @property
    def model(self):
        return self._model

    @property
    def weight_devices(self) -> int:
        """Devices the sampler's weights span (hardware.rollout_mesh at work)."""
        return weight_devices(self._model)

    def close(self) -> None:
        """Nothing to release (the vLLM sampler's close stops its engine process)."""

    def reseed(self, seed: int) -> None:
        """Restart the sampling key from `seed`: a caller that reseeds each round makes rounds independent of order."""
        self._key = jax.random.PRNGKey(seed)

    def set_weights(self, model, version: int, lent: bool = False) -> None:
        """Queue new weights (same shapes) for the next chunk boundary; thread-safe; the latest call wins.
        lent: `model`'s arrays may alias memory reused once this returns (a shared-memory slot): the laid-out copy,
        the only one the sampler keeps (the layout program writes fresh buffers), is finished before returning."""
        model = self._layout(model)
        if lent:
            jax.block_until_ready(model)
        with self._weights_lock:
            self._pending = (model, int(version))

    def _apply_pending_weights(self) -> bool:
        with self._weights_lock:
            pending, self._pending = self._pending, None
        if pending is None:
            return False
        self._model, self._version = pending
        return True

    # ------------------------------------------------------------------ generation

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[SampleRequest],
        n: int = 1,
        *,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
        key: jax.Array | None = None,
        on_chunk: Callable[[int], None] | None = None,
    ) -> list[list[Completion]]:
        """n completions of each prompt, as [prompt][n]. SampleRequests carry their own n (then `n` is ignored).

        temperature / max_new_tokens default to the sampler config; `on_chunk(chunks_done)` is called between
        decode chunks (weights set from it apply to the next chunk).
        """
        prompt_list, counts = normalize_prompts(prompts, n, self.vocab_size)
        temperature = self.cfg.temperature if temperature is None else float(temperature)
        max_new = self.cfg.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        check_generation(prompt_list, temperature, max_new, self.max_seq_len)
        if key is None:
            self._key, key = jax.random.split(self._key)

        rows = [(pi, j) for pi, c in enumerate(counts) for j in range(c)]
        results: list[list[Completion | None]] = [[None] * c for c in counts]
        params = self._decode_params(temperature, max_new)
        t0 = time.perf_counter()
        generated = 0
        with self._generate_lock:
            progress = WaveProgress()
            for wave_index, start in enumerate(range(0, len(rows), self.max_batch)):
                wave_rows = rows[start : start + self.max_batch]
                wave = WaveRequest(
                    prompts=[prompt_list[pi] for pi, _ in wave_rows],
                    prompt_index=[pi for pi, _ in wave_rows],
                    max_new=max_new,
                    on_chunk=on_chunk,
                    last=start + self.max_batch >= len(rows),
                )
                wave_key = jax.random.fold_in(key, wave_index)  # the waves of one call draw independent tokens
                for (pi, j), comp in zip(wave_rows, self._generate_wave(wave, params, wave_key, progress)):
                    results[pi][j] = comp
                    generated += len(comp.tokens)
        seconds = time.perf_counter() - t0
        self.last_stats = {
            "tokens": generated,  # response tokens returned
            "seconds": seconds,
            "tokens_per_s": generated / max(seconds, 1e-9),
            "chunks": progress.chunks,
            "swaps": progress.swaps,  # weight swaps applied between chunks
            "row_steps": progress.row_steps,  # decoded rows x decode steps, finished rows included
        }
        return results  # type: ignore[return-value]

    def _decode_params(self, temperature: float, max_new: int) -> kernels.DecodeParams:
        """The decode knobs as device scalars, replicated on the mesh; built once per (temperature, max_new) pair:
        seven transfers cost ~0.8 ms, a few percent of a 0.15M RL step's sampling."""
        params = self._params_seen.get((temperature, max_new))
        if params is None:
            params = jax.device_put(kernels.DecodeParams(
                temperature=np.float32(temperature),
                greedy=np.bool_(self.cfg.greedy),
                top_k=np.int32(self.cfg.top_k),
                top_p=np.float32(self.cfg.top_p),
                eos_ids=np.asarray(self.eos_ids or [-1], np.int32),
                max_new_tokens=np.int32(max_new),
                pad_id=np.int32(self.pad_id),
            ), replicated(self.mesh))
            self._params_seen[(temperature, max_new)] = params
        return params

    def _timed(self, name: str, fn, shape_note: str, *args, **kwargs):
        """Run a jitted kernel; log a compile event when its compilation cache grows."""
        cache_size = getattr(fn, "_cache_size", lambda: 0)  # jax.jit's compiled-program count
        before = cache_size()
        t = time.perf_counter()
        with compute_scope(self.mesh):  # Levanter's own sharding constraints resolve to this mesh
            out = fn(*args, **kwargs)
        if cache_size() > before:
            jax.block_until_ready(out)
            self._note_compile(name, shape_note, time.perf_counter() - t)
        return out

    def _note_compile(self, name: str, shape_note: str, seconds: float) -> None:
        msg = f"compiled {name} ({shape_note}) in {seconds:.1f}s"
        self.compile_events.append(msg)
        logger.info("sampler: %s", msg)

    def _generate_wave(
        self, wave: WaveRequest, params: kernels.DecodeParams, wave_key: jax.Array, progress: WaveProgress,
    ) -> list[Completion]:
        """One wave of <= max_batch rows: prefill, then the device loop of decode chunks with swaps in between."""
        packed = pack_prompts(wave.prompts, self._batch_bucket(len(wave.prompts)), self.max_seq_len, self.pad_id)
        self._apply_pending_weights()
        B, S = packed.tokens_BS.shape
        where = kernels.state_sharding(self.mesh)
        tokens_BS, pad_B = jax.device_put((packed.tokens_BS, packed.pad_B), (where.tokens, where.pad))
        fill_len = _pow2_bucket(max(packed.prompt_end - 1, 1), MIN_FILL_BUCKET, S)
        slots = max(fill_len, self._cache_slots(packed.prompt_end - 1 + self.cfg.decode_chunk))
        cache = self._prefill(packed, tokens_BS, pad_B, fill_len, slots)
        cur, gen_start, done_B = jax.device_put(
            (np.int32(packed.prompt_end - 1), np.int32(packed.prompt_end), packed.done_B),
            (where.cur, where.gen_start, where.done),
        )
        state = kernels.DecodeState(
            tokens=tokens_BS, pad=pad_B, cur=cur, gen_start=gen_start, done=done_B, cache=cache,
        )
        rows = WaveRows(len(wave.prompts), wave.max_new, self.cfg.stop, self._decode_text)
        cur = packed.prompt_end - 1
        while True:
            version = self._version  # weights of this chunk: swaps only happen below, between chunks
            state = self._grow_cache(state, cur + self.cfg.decode_chunk)
            slots = state.cache.num_slots
            state, out = self._timed(
                "decode_chunk", self._kernels.decode_chunk, f"batch={B} slots={slots} steps={self.cfg.decode_chunk}",
                self._model, state, wave_key, params,
                num_steps=self.cfg.decode_chunk,
            )
            out = jax.device_get(out)
            steps = int(state.cur) - cur  # < decode_chunk when every row finished early
            cur += steps
            progress.chunks += 1
            progress.row_steps += rows.n * steps
            stopped_B = rows.absorb(out, version, B)
            if rows.all_finished:
                break
            if stopped_B.any():  # stop-string hits: stop decoding those rows on device too
                stopped_B = jax.device_put(stopped_B, rows_sharding(self.mesh, 1))
                state = state._replace(done=state.done | stopped_B)
            if wave.on_chunk is not None:
                wave.on_chunk(progress.chunks)
            state = self._swap_between_chunks(state, cur, progress, swaps_expected=wave.on_chunk is not None)
        if wave.on_chunk is not None and not wave.last:
            wave.on_chunk(progress.chunks)
        return rows.completions(wave.prompt_index)

    def _prefill(self, packed, tokens_BS: jax.Array, pad_B: jax.Array, length: int, slots: int) -> kernels.KvCache:
        """KV cache of the wave's prompt slots [0, length). Rows that repeat a prompt (n answers to it) take the cache
        of one computed copy: a GRPO wave of 4 prompts x 8 answers runs the prefill on a batch bucket of 8 rows, not
        32 (docs/benchmarks.md "Stop 31": sampling in the 4M RL run 0.302 s -> 0.272-0.281 s a step)."""
        B = tokens_BS.shape[0]
        where = kernels.state_sharding(self.mesh)
        prompt_rows = np.concatenate([packed.pad_B[:, None], packed.tokens_BS[:, :length]], axis=1)
        _, first_U, prompt_of_B = np.unique(prompt_rows, axis=0, return_index=True, return_inverse=True)
        U = self._batch_bucket(len(first_U))
        if U >= B:
            return self._timed(
                "prefill", self._kernels.fill, f"batch={B} length={length}", self._model, tokens_BS, pad_B,
                init_cache(self._model, B, slots, self.compute_dtype, where.cache), length=length,
            )
        computed_U = np.resize(first_U, U)  # the bucket's spare rows repeat real prompts (never read)
        tokens_U, pad_U, prompt_of_B = jax.device_put(
            (packed.tokens_BS[computed_U], packed.pad_B[computed_U], prompt_of_B.reshape(B).astype(np.int32)),
            (where.tokens, where.pad, replicated(self.mesh)),
        )
        return self._timed(
            "prefill", self._kernels.fill_shared, f"batch={B} from {U} rows length={length}", self._model,
            tokens_U, pad_U, init_cache(self._model, U, slots, self.compute_dtype, where.cache), prompt_of_B,
            length=length,
        )

    def _batch_bucket(self, rows: int) -> int:
        """Power-of-two bucket, rounded up to a multiple of the mesh's row split (every device takes whole rows)."""
        bucket = _pow2_bucket(rows, min(MIN_BATCH_BUCKET, self.max_batch), self.max_batch)
        split = row_split(self.mesh)
        return -(-bucket // split) * split

    def _cache_slots(self, needed: int) -> int:
        """KV cache slots for `needed` slots: the length bucket from MIN_CACHE_BUCKET, capped at max_seq_len."""
        return length_bucket(needed, self.max_seq_len, minimum=MIN_CACHE_BUCKET)

    def _grow_cache(self, state: kernels.DecodeState, needed: int) -> kernels.DecodeState:
        """The state with a cache of at least `needed` slots (the next chunk writes up to slot cur + chunk - 1)."""
        slots = self._cache_slots(needed)
        if slots <= state.cache.num_slots:
            return state
        cache = self._timed(
            "grow_cache", self._kernels.grow, f"batch={state.tokens.shape[0]} slots={slots}", state.cache,
            num_slots=slots,
        )
        return state._replace(cache=cache)

    def _swap_between_chunks(self, state: kernels.DecodeState, cur: int, progress: WaveProgress, *,
                             swaps_expected: bool) -> kernels.DecodeState:
        """Apply weights queued by set_weights; with kv_on_swap=recompute, rebuild the cache under them.

        When swaps are expected (an in-flight caller: `on_chunk` given), a boundary without a swap still compiles its
        refill program, once per shape: the programs compile in the first waves, where the decode programs compile
        too, and a swap at a boundary shape already reached runs without a compile (a ~1.5 s compile at each new
        shape had stalled in-flight sampling: docs/benchmarks.md "Stop 38").
        """
        swapped = self._apply_pending_weights()
        progress.swaps += int(swapped)
        if self.kv_on_swap != "recompute" or not (swapped or swaps_expected):
            return state
        length = _pow2_bucket(cur, MIN_FILL_BUCKET, state.cache.num_slots)
        shape = (state.tokens.shape[0], length, state.cache.num_slots)
        if shape not in self._refills:
            self._refills[shape] = self._compile_refill(state, length)
        if not swapped:
            return state
        with compute_scope(self.mesh):
            return state._replace(cache=self._refills[shape](self._model, state.tokens, state.pad, state.cache))

    def _compile_refill(self, state: kernels.DecodeState, length: int):
        """The refill program (the fill kernel over slots [0, length)) for `state`'s shapes, compiled from their types
        alone: warming it allocates no second cache, and a swap whose arrays differ in type fails instead of
        recompiling."""
        t = time.perf_counter()
        cache_type = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state.cache)
        with compute_scope(self.mesh):
            program = self._kernels.fill.lower(
                self._model, state.tokens, state.pad, cache_type, length=length
            ).compile()
        self._note_compile(
            "refill", f"batch={state.tokens.shape[0]} length={length} slots={state.cache.num_slots}",
            time.perf_counter() - t,
        )
        return program

    def _decode_text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)
