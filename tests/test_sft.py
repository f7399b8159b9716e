"""SFT warm-start: token layout, example sources, the loss goes down, mode=sft writes a checkpoint."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from spec_helpers import compose_spec
from tiny_policy import count_compiles, tiny_model

from marin_rl.config.seeds import numpy_rng
from marin_rl.environments import build_environment
from marin_rl.models.tokenizer import build_char_tokenizer
from marin_rl.modes.sft import sft_main
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.mesh import build_mesh, shard_params
from marin_rl.training.sft import encode_examples, run_sft, sft_examples


def test_encode_examples_layout_and_truncation():
    tok = build_char_tokenizer()
    tokens, mask = encode_examples([("Q: 1+2\nA: ", "3"), ("Q: 10+20\nA: ", "30")], tok, max_seq_len=64)
    assert tokens.shape == mask.shape == (2, 32)  # longest row (16 tokens) padded up to the 32-token bucket
    row = tokens[0].tolist()
    prompt_len = 1 + len("Q: 1+2\nA: ")
    assert row[0] == tok.bos_token_id and tok.decode(row[1:prompt_len]) == "Q: 1+2\nA: "
    assert row[prompt_len : prompt_len + 2] == [tok.convert_tokens_to_ids("3"), tok.eos_token_id]
    assert set(row[prompt_len + 2 :]) == {tok.pad_token_id}
    np.testing.assert_array_equal(np.nonzero(mask[0])[0], [prompt_len, prompt_len + 1])  # response + eos only
    # an over-long prompt keeps its end (where the question is), the response stays whole
    tokens, mask = encode_examples([("x" * 50 + "END", "42")], tok, max_seq_len=16)
    assert tokens.shape == (1, 16) and tok.decode(tokens[0, :13]).endswith("END")
    assert mask.sum() == 3
    with pytest.raises(ValueError, match="at least one"):
        encode_examples([], tok, 16)


def test_sft_examples_from_env_and_from_jsonl(tmp_path):
    spec = compose_spec(["mode=sft", "sft.batch_size=4", "train.steps=2"])
    env = build_environment(spec.env, seed=0)
    examples = sft_examples(spec, env)
    assert len(examples) == 8  # steps x batch_size in mode=sft
    for prompt, response in examples:
        assert prompt.startswith("Q: ") and prompt.endswith("A: ") and response
    problems = env.sample(8, numpy_rng(spec.seed, "sft-examples"))  # the SFT data stream of the seed
    assert [env.reference_response(p) for p in problems] == [r for _, r in examples]

    path = tmp_path / "synthetic.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": f"Q: {i}\nA: ", "response": str(i)}) for i in range(3)))
    spec = compose_spec([f"sft.source={path}"])
    assert sft_examples(spec, env) == [(f"Q: {i}\nA: ", str(i)) for i in range(3)]


def test_run_sft_lowers_response_loss(tmp_path):
    model, tokenizer, _ = tiny_model()
    examples = [
        (f"Q: {a}+{b}\nA: ", str(a + b)) for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (2, 9), (12, 30)]
    ]
    log = tmp_path / "sft.jsonl"
    trained, history = run_sft(
        model, tokenizer, examples, steps=30, batch_size=4, lr=1e-2, seed=0, max_seq_len=64, log_path=log
    )
    assert len(history) == 30 and all(np.isfinite(history))
    assert np.mean(history[-5:]) < 0.5 * np.mean(history[:3])
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31)) and rows[-1]["sft/loss"] == history[-1]
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool((a != b).any()), model, trained))
    assert any(changed)


def test_sft_of_a_model_on_the_trainer_mesh_compiles_its_step_once():
    """The RL trainer and mode=sft hold the model placed on the trainer mesh. The first step's arguments are then
    placed as every later step's are, so one compiled step serves them all; before, the unplaced optimizer
    state, step and key made step 2 compile the step again (~6 s of every warm-started run on 2 cores)."""
    model, tokenizer, _ = tiny_model()
    mesh = build_mesh({"data": 1})
    model = shard_params(model, mesh)
    examples = [(f"Q: {a}+{b}\nA: ", str(a + b)) for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)]]
    sft = dict(batch_size=2, lr=7e-3, seed=0, max_seq_len=32, mesh=mesh)  # an lr of its own: a fresh step
    with count_compiles() as first:
        run_sft(model, tokenizer, examples, steps=1, **sft)
    assert first, "the step compiled in another test: this one needs a step of its own"
    with count_compiles() as later:
        run_sft(model, tokenizer, examples, steps=3, **sft)
    assert later == []


def test_sft_main_writes_a_checkpoint_and_metrics(tmp_path):
    # the shapes and optimizer of test_run_sft_lowers_response_loss, so the compiled SFT step is reused
    same_model = ["model.hidden_dim=32", "model.intermediate_dim=64", "model.max_seq_len=64"]
    spec = compose_spec(
        ["mode=sft", "recipe=quickstart", "train.steps=3", "sft.batch_size=4", "sft.lr=1e-2", *same_model]
    )
    path = sft_main(spec, tmp_path)
    assert ckpt.is_checkpoint(path) and ckpt.latest_checkpoint(tmp_path / "checkpoints") == path
    assert ckpt.checkpoint_step(path) == 3
    assert ckpt.read_model_config(path) == spec.model
    assert ckpt.read_extra(path)["sft"]["steps"] == 3
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(np.isfinite(r["sft/loss"]) for r in rows)
