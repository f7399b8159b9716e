"""The levanter sampler: exact log-probs vs the trainer, in-flight weight swaps with per-token versions, top-k/top-p,
greedy, stops, fixed compiled shapes. All tests share one batch bucket (8 rows) and one decode chunk length (but
the chunk-independence test, which adds a second), so the decoder compiles once or twice per model shape."""

from __future__ import annotations

import os
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from marin_rl.config.spec import ModelConfig, SamplerConfig
from marin_rl.inference import sampler as sampler_module
from marin_rl.inference.sampler import Completion, Sampler, SampleRequest
from marin_rl.inference.token_choice import truncation_mask
from marin_rl.models.policy import build_policy
from marin_rl.models.tokenizer import build_char_tokenizer
from marin_rl.training.logprobs import full_logits, response_logprobs

MAX_SEQ_LEN = 64
# teacher-forced batches are padded to this length (one compiled shape for the reference; every row fits it)
TEACHER_LEN = MAX_SEQ_LEN
TOL = 1e-4


def sampler_cfg(**kw) -> SamplerConfig:
    base = dict(name="levanter", temperature=1.0, max_new_tokens=24, decode_chunk=8)
    base.update(kw)
    return SamplerConfig(**base)


def tiny(num_kv_heads: int = 4, seed: int = 0):
    cfg = ModelConfig(
        name="tiny", kind="tiny", max_seq_len=MAX_SEQ_LEN, num_heads=4, num_kv_heads=num_kv_heads
    )
    model, tokenizer, _ = build_policy(cfg, jax.random.PRNGKey(seed))
    return model, tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model_a():
    return tiny(seed=0)[0]


@pytest.fixture(scope="module")
def model_b():
    return tiny(seed=1)[0]


@pytest.fixture(scope="module")
def prompts(tok):
    return [tok(t)["input_ids"] for t in ("2+2=", "Hello", "x")]


_teacher = jax.jit(response_logprobs, static_argnums=(2,))
_logits = jax.jit(full_logits)


def _rows(prompts, results):
    return [(prompts[c.prompt_index], c) for comps in results for c in comps]


def _padded(rows) -> jnp.ndarray:
    arr = np.zeros((len(rows), TEACHER_LEN), np.int32)  # right padding with pad id 0 (marin_rl/training/logprobs.py)
    for i, (p, c) in enumerate(rows):
        arr[i, : len(p) + len(c.tokens)] = p + c.tokens
    return jnp.asarray(arr)


def teacher_logprobs(model, rows, temperature: float) -> list[np.ndarray]:
    """The trainer's log-probs of each completion's tokens, given its prompt, under `model`."""
    ref = np.asarray(_teacher(model, _padded(rows), float(temperature)))
    return [ref[i, len(p) : len(p) + len(c.tokens)] for i, (p, c) in enumerate(rows)]


def max_abs_diff(model, rows, temperature: float) -> float:
    refs = teacher_logprobs(model, rows, temperature)
    return max(float(np.max(np.abs(r - np.asarray(c.logprobs)))) for r, (_, c) in zip(refs, rows))


def check_completion_shape(c: Completion, max_new: int, eos_id: int) -> None:
    assert 1 <= len(c.tokens) <= max_new
    assert len(c.logprobs) == len(c.versions) == len(c.sampling_logprobs) == len(c.tokens)
    assert eos_id not in c.tokens[:-1]  # generation stops at the first EOS, which is kept
    assert c.finish_reason == ("stop" if c.tokens[-1] == eos_id else "length")
    assert c.finish_reason == "stop" or len(c.tokens) == max_new


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_trainer(model_a, tok, prompts, temperature):
    s = Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN, version=3, seed=1)
    results = s.generate(prompts, 2, temperature=temperature)
    assert [len(r) for r in results] == [2, 2, 2]
    rows = _rows(prompts, results)
    for _, c in rows:
        check_completion_shape(c, 24, tok.eos_token_id)
        assert c.versions == [3] * len(c.tokens) and c.version_span == (3, 3)
        # no truncation: the sampled distribution is the full softmax
        assert c.sampling_logprobs == c.logprobs
    assert max_abs_diff(model_a, rows, temperature) < TOL
    # the comparison can fail: at the other temperature the same tokens score differently
    assert max_abs_diff(model_a, rows, 1.7 - temperature) > 1e-2


def test_gqa_model_logprobs_match_trainer(tok, prompts):
    model, tokenizer = tiny(num_kv_heads=2, seed=2)
    s = Sampler(model, tokenizer, sampler_cfg(), MAX_SEQ_LEN)
    rows = _rows(prompts, s.generate(prompts, 2, temperature=0.7))
    assert max_abs_diff(model, rows, 0.7) < TOL


def test_repeated_prompts_share_one_prefill(model_a, tok, prompts):
    # 3 prompts x 8 answers: a wave of 24 rows (bucket 32) whose prefill runs on a bucket of 8 rows, one per prompt;
    # a row that took another prompt's cache would score its tokens wrongly
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=8), MAX_SEQ_LEN, max_batch=32, seed=4)
    results = s.generate(prompts, 8)
    assert any("prefill (batch=32 from 8 rows" in e for e in s.compile_events), s.compile_events
    rows = _rows(prompts, results)
    assert len(rows) == 24 and max_abs_diff(model_a, rows, 1.0) < TOL
    assert all(len({tuple(c.tokens) for c in comps}) > 1 for comps in results)  # rows still sample apart


def _swap_at_first_boundary(sampler: Sampler, new_model, version: int):
    calls = []

    def on_chunk(chunks_done: int) -> None:
        calls.append(chunks_done)
        if chunks_done == 1:
            sampler.set_weights(new_model, version)

    return on_chunk, calls


def test_weight_swap_mid_generation_recomputes_cache(model_a, model_b, tok, prompts):
    cfg = sampler_cfg(max_new_tokens=20)
    s = Sampler(model_a, tok, cfg, MAX_SEQ_LEN, version=0, seed=2)
    on_chunk, calls = _swap_at_first_boundary(s, model_b, 1)
    s.generate(prompts, 2, key=jax.random.PRNGKey(0))  # compiles what this test's shapes need, if not yet done
    n_compiled = len(s.compile_events)
    rows = _rows(prompts, s.generate(prompts, 2, on_chunk=on_chunk))
    assert calls[:2] == [1, 2]
    chunk = cfg.decode_chunk
    for _, c in rows:
        assert c.versions == [0] * min(chunk, len(c.tokens)) + [1] * max(len(c.tokens) - chunk, 0)
    long_rows = [r for r in rows if len(r[1].tokens) > chunk]
    assert long_rows, "no sequence survived the first chunk; the swap was not exercised"
    assert (long_rows[0][1].min_version, long_rows[0][1].max_version) == (0, 1)
    ref_a, ref_b = teacher_logprobs(model_a, rows, 1.0), teacher_logprobs(model_b, rows, 1.0)
    for (_, c), a, b in zip(rows, ref_a, ref_b):
        lp = np.asarray(c.logprobs)
        assert np.max(np.abs(lp[:chunk] - a[:chunk])) < TOL  # before the swap: the old weights
        if len(lp) > chunk:
            assert np.max(np.abs(lp[chunk:] - b[chunk:])) < TOL  # after: exactly the new weights
            assert np.max(np.abs(lp[chunk:] - a[chunk:])) > 1e-2  # ... which really differ from the old ones
    # the swap reused the compiled decode program (same shapes), only the refill may be new
    assert not any("decode_chunk" in e for e in s.compile_events[n_compiled:])


def test_in_flight_waves_compile_refills_before_a_swap_needs_them(model_a, model_b, tok, prompts, monkeypatch):
    # a 16-slot floor and 40 new tokens: the cache grows 16 -> 24 -> 32 -> 48 slots, so the refill shape (rows,
    # length, slots) differs from one chunk boundary to the next; one key: the same rows (and boundaries) each call
    monkeypatch.setattr(sampler_module, "MIN_CACHE_BUCKET", 16)
    cfg = sampler_cfg(max_new_tokens=40)
    s = Sampler(model_a, tok, cfg, MAX_SEQ_LEN, version=0, seed=9)

    def new_compiles(**kwargs) -> tuple[list[str], list]:
        """The compile events of one generate call, and its rows."""
        before = len(s.compile_events)
        rows = _rows(prompts, s.generate(prompts, 2, temperature=0.7, key=jax.random.PRNGKey(3), **kwargs))
        assert max(len(c.tokens) for _, c in rows) > 3 * cfg.decode_chunk, "no row reached the third boundary"
        return s.compile_events[before:], rows

    def refills(events: list[str]) -> list[str]:
        return [e for e in events if e.startswith("compiled refill")]

    assert refills(new_compiles()[0]) == []  # sync (no on_chunk): no refill compiled
    warmed = refills(new_compiles(on_chunk=lambda _: None)[0])  # in flight, no swap yet: one per boundary shape
    assert len(warmed) >= 3 and len(set(warmed)) == len(warmed)
    assert new_compiles(on_chunk=lambda _: None)[0] == []  # the same boundaries again: nothing new
    on_chunk, _ = _swap_at_first_boundary(s, model_b, 1)
    events, rows = new_compiles(on_chunk=on_chunk)
    assert events == []  # the swap ran the refill compiled ahead of it ...
    chunk = cfg.decode_chunk
    for (_, c), b in zip(rows, teacher_logprobs(model_b, rows, 0.7)):  # ... and rebuilt the cache under model_b
        assert c.versions == [0] * min(chunk, len(c.tokens)) + [1] * max(len(c.tokens) - chunk, 0)
        assert len(c.tokens) <= chunk or np.max(np.abs(np.asarray(c.logprobs[chunk:]) - b[chunk:])) < TOL


def test_kv_cache_grows_with_the_sequences_and_stays_exact(model_a, model_b, tok, prompts, monkeypatch):
    # a 16-slot floor: up to 56 new tokens after prompts of <= 5 grow the cache 16 -> 24 -> 32 -> 48 -> 64
    # (MAX_SEQ_LEN)
    monkeypatch.setattr(sampler_module, "MIN_CACHE_BUCKET", 16)
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=56), MAX_SEQ_LEN, version=0, seed=4)
    decoded_slots: list[int] = []  # the cache size each decode chunk ran on
    real_decode = s._kernels.decode_chunk

    def spy(model, state, *args, **kwargs):
        decoded_slots.append(state.cache.num_slots)
        return real_decode(model, state, *args, **kwargs)

    s._kernels = s._kernels._replace(decode_chunk=spy)
    rows = _rows(prompts, s.generate(prompts, 2, temperature=0.7))
    assert max(len(c.tokens) for _, c in rows) > 28, "no row grew past 32 slots"
    assert decoded_slots[0] == 16 and decoded_slots == sorted(decoded_slots) and decoded_slots[-1] == MAX_SEQ_LEN
    assert sorted(set(decoded_slots)) == [16, 24, 32, 48, MAX_SEQ_LEN]
    assert max_abs_diff(model_a, rows, 0.7) < TOL
    # a swap after the first chunk rebuilds the grown cache exactly under the new weights
    on_chunk, _ = _swap_at_first_boundary(s, model_b, 1)
    rows = _rows(prompts, s.generate(prompts, 2, temperature=0.7, on_chunk=on_chunk))
    chunk = s.cfg.decode_chunk
    assert max(len(c.tokens) for _, c in rows) > 28
    for (_, c), b in zip(rows, teacher_logprobs(model_b, rows, 0.7)):
        assert len(c.tokens) <= chunk or np.max(np.abs(np.asarray(c.logprobs[chunk:]) - b[chunk:])) < TOL


def test_set_weights_takes_host_arrays_and_other_float_dtypes(model_a, model_b, tok, prompts):
    """A pulled weight set arrives as host arrays, a trainer's may be bf16: both are placed, cast to the sampler's
    dtype and laid out by the one compiled program; host arrays decode exactly as the device model they copy."""
    import equinox as eqx

    s = Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN, version=0, seed=2)
    s.set_weights(jax.tree.map(lambda x: np.asarray(x) if eqx.is_array(x) else x, model_b), 1)
    rows = _rows(prompts, s.generate(prompts, 2, key=jax.random.PRNGKey(0)))
    assert {c.max_version for _, c in rows} == {1}
    assert max_abs_diff(model_b, rows, 1.0) < TOL
    s.set_weights(jax.tree.map(lambda x: x.astype(jnp.bfloat16) if eqx.is_array(x) else x, model_b), 2)
    s.generate(prompts[:1], 1, key=jax.random.PRNGKey(0))
    assert {x.dtype for x in jax.tree.leaves(eqx.filter(s.model, eqx.is_array))} == {jnp.dtype(jnp.float32)}


def test_weights_lent_by_a_shared_memory_slot_are_copied_before_it_is_released(model_a, model_b, tok, prompts,
                                                                               tmp_path):
    """A rollout worker places a swap's weights as views of the shared-memory slot (no copy) and hands them to
    set_weights(lent=True): the sampler's laid-out copy is all it keeps, so rewriting the slot afterwards (the
    trainer's next lap of the ring) leaves the sampler decoding the weights it was given."""
    from marin_rl.runtime.weight_sync import SharedMemoryChannel, WeightPlacement, model_to_arrays

    s = Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN, version=0, seed=2)
    channel = SharedMemoryChannel(tmp_path, slots=1)
    packet = channel.publish(model_to_arrays(model_b), 1)
    placement = WeightPlacement(model_a, s.mesh)
    with channel.fetched(packet, timeout_s=1) as arrays:
        lo, hi = min(a.ctypes.data for a in arrays), max(a.ctypes.data + a.nbytes for a in arrays)
        in_slot = lambda leaves: [x for x in leaves if lo <= x.unsafe_buffer_pointer() < hi]  # noqa: E731
        placed = placement.model(arrays)
        assert in_slot(jax.tree.leaves(placed))  # the zero-copy placement this test is about
        s.set_weights(placed, 1, lent=True)
        del placed  # as a worker's swap: nothing but the sampler's copy outlives the block
    inode = os.stat(packet.path).st_ino
    channel.publish(model_to_arrays(model_a), 2)  # slot0 rewritten in place, under the placed views
    assert os.stat(packet.path).st_ino == inode
    assert not in_slot(jax.tree.leaves(s._pending[0]))
    rows = _rows(prompts, s.generate(prompts, 2, key=jax.random.PRNGKey(0)))
    assert {c.max_version for _, c in rows} == {1}
    assert max_abs_diff(model_b, rows, 1.0) < TOL


def test_weight_swap_keep_cache_continues_on_old_kv(model_a, model_b, tok, prompts):
    # re-publishing the same weights as a new version: the kept cache is still exact, only the versions move on
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=20), MAX_SEQ_LEN, kv_on_swap="keep", seed=3)
    on_chunk, _ = _swap_at_first_boundary(s, model_a, 5)
    rows = _rows(prompts, s.generate(prompts, 2, on_chunk=on_chunk))
    assert all(c.versions == [0] * min(8, len(c.tokens)) + [5] * max(len(c.tokens) - 8, 0) for _, c in rows)
    assert max_abs_diff(model_a, rows, 1.0) < TOL
    # different weights: tokens after the swap attend to keys/values the old weights wrote, so their log-probs are
    # not the new policy's (kv_on_swap="recompute" matches it exactly, see the test above)
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=20), MAX_SEQ_LEN, kv_on_swap="keep", seed=3)
    on_chunk, _ = _swap_at_first_boundary(s, model_b, 5)
    rows = [r for r in _rows(prompts, s.generate(prompts, 2, on_chunk=on_chunk)) if len(r[1].tokens) > 8]
    assert rows
    err_new = [
        np.abs(np.asarray(c.logprobs[8:]) - r[8:])
        for (_, c), r in zip(rows, teacher_logprobs(model_b, rows, 1.0))
    ]
    assert max(e.max() for e in err_new) > 1e-2


def test_set_weights_from_another_thread(model_a, model_b, tok, prompts):
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=24), MAX_SEQ_LEN, version=0, seed=4)
    first_chunk, swapped = threading.Event(), threading.Event()

    def pull_weights():  # what a weight-sync thread of a rollout worker does
        first_chunk.wait(30)
        s.set_weights(model_b, 9)
        swapped.set()

    def on_chunk(k: int) -> None:
        if k == 1:
            first_chunk.set()
            swapped.wait(30)

    t = threading.Thread(target=pull_weights)
    t.start()
    rows = _rows(prompts, s.generate(prompts, 2, on_chunk=on_chunk))
    t.join()
    ref_a, ref_b = teacher_logprobs(model_a, rows, 1.0), teacher_logprobs(model_b, rows, 1.0)
    for (_, c), a, b in zip(rows, ref_a, ref_b):
        v = np.asarray(c.versions)
        assert v.tolist() == [0] * min(8, len(v)) + [9] * max(len(v) - 8, 0)
        lp = np.asarray(c.logprobs)
        assert np.max(np.abs(np.where(v == 0, lp - a, lp - b))) < TOL
    assert s.version == 9


def test_truncation_mask_top_k_then_top_p():
    z = jnp.log(jnp.asarray([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    keep = lambda k, p: np.asarray(truncation_mask(z, jnp.asarray(k), jnp.asarray(p)))[0].tolist()  # noqa: E731
    assert keep(0, 1.0) == [True] * 5
    assert keep(2, 1.0) == [True, True, False, False, False]
    assert keep(0, 0.6) == [True, True, False, False, False]  # 0.5 < 0.6 <= 0.5 + 0.2
    assert keep(0, 0.5) == [True, False, False, False, False]
    # top-p over the top-3 renormalised (0.5, 0.2, 0.15)/0.85: 0.588 < 0.8 <= 0.824
    assert keep(3, 0.8) == [True, True, False, False, False]


def test_top_k_top_p_sampling_logprobs(model_a, tok, prompts):
    top_k, top_p, temperature = 6, 0.8, 0.7
    s = Sampler(model_a, tok, sampler_cfg(top_k=top_k, top_p=top_p), MAX_SEQ_LEN, seed=5)
    rows = _rows(prompts, s.generate(prompts, 2, temperature=temperature))
    assert max_abs_diff(model_a, rows, temperature) < TOL  # `logprobs` stay the trainer's full-softmax ones
    logits = np.asarray(_logits(model_a, _padded(rows)), np.float64) / temperature
    truncated_somewhere = False
    for i, (p, c) in enumerate(rows):
        for t, y in enumerate(c.tokens):
            z = logits[i, len(p) + t - 1]
            order = np.argsort(-z)
            probs_k = np.exp(z[order[:top_k]] - np.logaddexp.reduce(z[order[:top_k]]))
            n_keep = int(np.sum(np.cumsum(probs_k) - probs_k < top_p))
            kept = order[:n_keep]
            assert y in kept
            expected = z[y] - np.logaddexp.reduce(z[kept])
            assert abs(c.sampling_logprobs[t] - expected) < TOL
            assert c.sampling_logprobs[t] >= c.logprobs[t] - 1e-6
            truncated_somewhere |= n_keep < len(z)
    assert truncated_somewhere


def test_greedy_is_argmax_with_temperature_one_logprobs(model_a, tok, prompts):
    s = Sampler(model_a, tok, sampler_cfg(max_new_tokens=16), MAX_SEQ_LEN, seed=6)
    first = s.generate(prompts, 2, temperature=0.0)
    again = s.generate(prompts, 1, temperature=0.0, key=jax.random.PRNGKey(99))
    rows = _rows(prompts, first)
    for pi, comps in enumerate(first):
        assert comps[0].tokens == comps[1].tokens == again[pi][0].tokens
    logits = np.asarray(_logits(model_a, _padded(rows)))
    for i, (p, c) in enumerate(rows):
        assert c.tokens == [int(np.argmax(logits[i, len(p) + t - 1])) for t in range(len(c.tokens))]
        assert c.sampling_logprobs == [0.0] * len(c.tokens)
    assert max_abs_diff(model_a, rows, 1.0) < TOL
    # the greedy flag does the same at any temperature
    flagged = Sampler(model_a, tok, sampler_cfg(max_new_tokens=16, greedy=True, temperature=0.7), MAX_SEQ_LEN)
    assert [c.tokens for c in flagged.generate(prompts, 1)[0]] == [first[0][0].tokens]


def test_stop_string_and_eos(model_a, tok, prompts):
    greedy = Sampler(model_a, tok, sampler_cfg(temperature=0.0, max_new_tokens=16), MAX_SEQ_LEN)
    base = greedy.generate(prompts[:1], 1)[0][0]
    text = tok.decode(base.tokens)
    stop = text[5:7]
    cut = text.index(stop) + len(stop)
    s = Sampler(model_a, tok, sampler_cfg(temperature=0.0, max_new_tokens=16, stop=[stop]), MAX_SEQ_LEN)
    c = s.generate(prompts[:1], 1)[0][0]
    assert tok.decode(c.tokens) == text[:cut] and c.finish_reason == "stop"
    assert c.logprobs == base.logprobs[:cut]

    eos_char = text[3]
    tok_eos = build_char_tokenizer()
    tok_eos.eos_token = eos_char  # the same tokenizer with a character as its EOS
    s = Sampler(model_a, tok_eos, sampler_cfg(temperature=0.0, max_new_tokens=16), MAX_SEQ_LEN)
    c = s.generate(prompts[:1], 1)[0][0]
    assert tok.decode(c.tokens) == text[: text.index(eos_char) + 1] and c.finish_reason == "stop"
    assert base.finish_reason == "length" and len(base.tokens) == 16


def test_waves_requests_and_no_recompiles(model_a, tok):
    # a fresh sampler on already-compiled shapes: new prompt lengths, temperatures, top-k/top-p, max_new_tokens and
    # more rows than max_batch (two waves of 8) must not compile anything
    s = Sampler(model_a, tok, sampler_cfg(top_p=0.9), MAX_SEQ_LEN, max_batch=8, seed=7)
    # compile this sampler's shapes here (one wave of <= 8 rows, prompts <= 16 tokens), whatever ran before; in
    # flight (on_chunk given), as the call below, so its refill program is among them
    s.generate([SampleRequest(tok("a")["input_ids"], 3)], temperature=1.0, max_new_tokens=10, on_chunk=lambda _: None)
    s.compile_events.clear()
    waves = []
    requests = [SampleRequest(tok("ab")["input_ids"], 4), SampleRequest(tok("0123456")["input_ids"], 5)]
    out = s.generate(requests, temperature=0.9, max_new_tokens=10, on_chunk=waves.append)
    assert [len(r) for r in out] == [4, 5]
    assert all(c.prompt_index == i for i, r in enumerate(out) for c in r)
    assert all(len(c.tokens) <= 10 for r in out for c in r)
    assert waves == list(range(1, len(waves) + 1)) and len(waves) >= 2
    assert s.compile_events == []


def test_samples_do_not_depend_on_the_decode_chunk(model_a, tok, prompts):
    # each step draws with fold_in(wave key, slot): sampler.decode_chunk changes speed and swap points, not tokens
    tokens = {}
    for chunk in (8, 3):
        s = Sampler(model_a, tok, sampler_cfg(decode_chunk=chunk), MAX_SEQ_LEN, version=0, seed=5)
        tokens[chunk] = [c.tokens for _, c in _rows(prompts, s.generate(prompts, 2, key=jax.random.PRNGKey(7)))]
    assert tokens[8] == tokens[3]
    assert len({tuple(t) for t in tokens[8]}) > len(prompts)  # the answers to one prompt really differ


def test_waves_of_one_call_draw_independently(model_a, tok):
    # 16 rows of one prompt with max_batch 8: two waves of identical rows; the wave index enters their keys
    s = Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN, max_batch=8, seed=6)
    (answers,) = s.generate([tok("ab")["input_ids"]], 16, key=jax.random.PRNGKey(3))
    first, second = [c.tokens for c in answers[:8]], [c.tokens for c in answers[8:]]
    assert first != second


def test_bad_inputs(model_a, tok):
    s = Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN)
    with pytest.raises(ValueError, match="max_seq_len=64"):
        s.generate([[1] * 50], 1, max_new_tokens=20)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        s.generate([[1], []], 1)
    with pytest.raises(ValueError, match="outside"):
        s.generate([[1, 10_000]], 1)
    other, _ = tiny(num_kv_heads=2)
    with pytest.raises(ValueError, match="shapes"):
        s.set_weights(other, 1)
    with pytest.raises(ValueError, match="kv_on_swap"):
        Sampler(model_a, tok, sampler_cfg(), MAX_SEQ_LEN, kv_on_swap="drop")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_qwen_models_logprobs_match_trainer(tok, prompts, family):
    """Qwen2 (bias on q/k/v, none on o) and Qwen3 (qk-norm), both GQA, with every weight perturbed off its init."""
    import haliax as hax
    from levanter.models.qwen import Qwen3Config, QwenConfig

    cls = QwenConfig if family == "qwen2" else Qwen3Config
    cfg = cls(
        seq_len=MAX_SEQ_LEN,
        hidden_dim=64,
        intermediate_dim=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        gradient_checkpointing=False,
    )
    model = cfg.build(hax.Axis("vocab", len(tok)), key=jax.random.PRNGKey(3))
    rng = np.random.default_rng(0)
    model = jax.tree.map(lambda x: x + 0.05 * rng.standard_normal(x.shape).astype(x.dtype), model)
    s = Sampler(model, tok, sampler_cfg(), MAX_SEQ_LEN)
    rows = _rows(prompts, s.generate(prompts, 2, temperature=0.7))
    assert max_abs_diff(model, rows, 0.7) < TOL


def test_pack_prompts_left_pads_to_a_common_end():
    from marin_rl.inference.wave import pack_prompts

    packed = pack_prompts([[5, 6, 7], [9]], batch_bucket=4, max_seq_len=6, pad_id=0)
    assert packed.prompt_end == 3
    np.testing.assert_array_equal(packed.tokens_BS[:2], [[5, 6, 7, 0, 0, 0], [0, 0, 9, 0, 0, 0]])
    np.testing.assert_array_equal(packed.pad_B, [0, 2, 2, 2])
    np.testing.assert_array_equal(packed.done_B, [False, False, True, True])  # bucket fillers never generate


def test_decode_layout_projects_weight_first_with_levanter_outputs(model_a):
    """Every Linear of the laid-out model is a WeightFirstLinear, and one returns what Levanter's Linear returns
    (a multi-axis Out and a bias included), its axes in the weight-first order."""
    import haliax as hax

    from marin_rl.inference.decoder import WeightFirstLinear, _weight_first, decode_layout

    is_linear = lambda x: isinstance(x, hax.nn.Linear)  # noqa: E731
    linears = [x for x in jax.tree.leaves(decode_layout(model_a), is_leaf=is_linear) if is_linear(x)]
    assert linears and all(type(x) is WeightFirstLinear for x in linears)

    Batch, Pos, Embed = hax.Axis("batch", 3), hax.Axis("position", 2), hax.Axis("embed", 8)
    Heads, HeadSize = hax.Axis("heads", 2), hax.Axis("head_size", 4)
    plain = hax.nn.Linear.init(Embed, (Heads, HeadSize), key=jax.random.PRNGKey(0), use_bias=True, out_first=False)
    plain = jax.tree.map(lambda x: x + 0.1, plain)  # a nonzero bias
    x = hax.random.normal(jax.random.PRNGKey(1), (Batch, Pos, Embed))
    expected, got = plain(x), _weight_first(plain)(x)
    assert [a.name for a in got.axes] == ["heads", "head_size", "batch", "position"]
    np.testing.assert_allclose(got.rearrange(expected.axes).array, expected.array, rtol=1e-6, atol=1e-6)
