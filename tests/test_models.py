"""Char tokenizer, tiny policy construction and chunked teacher-forced log-probs / entropies."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_policy import MODEL, tiny_model
from transformers import AutoTokenizer

from marin_rl.models.policy import build_policy, count_params
from marin_rl.models.tokenizer import CHARACTERS, build_char_tokenizer
from marin_rl.training.logprobs import full_logits, response_logprobs, token_entropy, token_stats

TINY = MODEL


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()  # build_policy(MODEL, PRNGKey(0)), shared with the other model/trainer test files


def right_padded(tokenizer, texts, seq_len):
    rows = np.full((len(texts), seq_len), tokenizer.pad_token_id, np.int32)
    for i, text in enumerate(texts):
        ids = tokenizer(text).input_ids[:seq_len]
        rows[i, : len(ids)] = ids
    return jnp.asarray(rows)


def test_char_tokenizer_round_trips_and_reloads_with_autotokenizer(tmp_path):
    tok = build_char_tokenizer()
    assert len(tok) == 4 + len(CHARACTERS)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    text = "Q: 12 + 30 = ?\n A:  \\boxed{42}~"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok("aéb", add_special_tokens=False).input_ids[1] == tok.unk_token_id

    tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded(text).input_ids == ids
    assert reloaded.decode(ids, skip_special_tokens=True) == text
    assert reloaded.pad_token_id == tok.pad_token_id and reloaded.eos_token_id == tok.eos_token_id


def test_tiny_policy_shapes(tiny):
    model, tokenizer, lev_config = tiny
    assert model.Vocab.name == "vocab" and model.Vocab.size == len(tokenizer)
    assert lev_config.hidden_dim == TINY.hidden_dim and lev_config.seq_len == TINY.max_seq_len
    assert lev_config.total_trainable_params(len(tokenizer)) == count_params(model)
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    assert all(x.dtype == jnp.float32 for x in leaves)
    bf16, _, _ = build_policy(TINY, jax.random.PRNGKey(0), dtype="bfloat16")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(eqx.filter(bf16, eqx.is_inexact_array)))
    with pytest.raises(ValueError, match="allowed"):
        build_policy(TINY, jax.random.PRNGKey(0), dtype="float16")


def test_logprobs_match_log_softmax_of_tempered_logits_chunked_or_not(tiny):
    model, tokenizer, _ = tiny
    tokens = right_padded(tokenizer, ["What is 2+2? 4", "a longer prompt, then a response"], 40)
    temperature = 0.7

    @jax.jit  # one compile for every quantity compared below
    def everything(model, tokens):
        log_p = jax.nn.log_softmax(full_logits(model, tokens) / temperature, axis=-1)
        want = jnp.take_along_axis(log_p[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
        want_entropy = -(jnp.exp(log_p) * log_p).sum(-1)[:, :-1]
        full = token_stats(model, tokens, temperature, None)
        chunked = token_stats(model, tokens, temperature, 7)  # V = 100 = 14 * 7 + 2: a ragged last chunk
        at_t1 = response_logprobs(model, tokens, 1.0)
        return want, want_entropy, full, chunked, at_t1, token_entropy(model, tokens, temperature, 7)

    want, want_entropy, full, chunked, at_t1, entropy = everything(model, tokens)
    np.testing.assert_allclose(full.logp[:, 1:], want, atol=1e-5)
    np.testing.assert_allclose(full.entropy[:, 1:], want_entropy, atol=1e-5)
    np.testing.assert_array_equal(full.logp[:, 0], 0.0)
    np.testing.assert_allclose(chunked.logp, full.logp, atol=1e-5)
    np.testing.assert_allclose(chunked.entropy, full.entropy, atol=1e-5)
    np.testing.assert_allclose(entropy, full.entropy, atol=1e-5)
    assert np.abs(at_t1 - full.logp)[:, 1:].max() > 1e-3  # the temperature really enters
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(model, tokens, 0.0)


def test_chunked_logprob_gradients_equal_full_vocab_gradients(tiny):
    model, tokenizer, _ = tiny
    tokens = right_padded(tokenizer, ["12+30=42", "abc"], 16)

    @eqx.filter_jit
    def both_grads(model):
        def grad(chunk):
            return eqx.filter_grad(lambda m: response_logprobs(m, tokens, 0.9, chunk).sum())(model)

        return grad(None), grad(16)

    full, chunked = both_grads(model)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(chunked), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * float(jnp.abs(a).max()))


def test_right_padding_does_not_change_earlier_logprobs(tiny):
    model, tokenizer, _ = tiny
    text = "prompt: 7*6 answer: 42"
    tokens = right_padded(tokenizer, [text], 32)
    n = len(tokenizer(text).input_ids)
    other_padding = tokens.at[:, n:].set(tokenizer.convert_tokens_to_ids("x"))
    changed_early = tokens.at[:, 2].set(tokenizer.convert_tokens_to_ids("9"))
    lp = jax.jit(response_logprobs)(model, jnp.concatenate([tokens, other_padding, changed_early]))
    np.testing.assert_allclose(lp[1, :n], lp[0, :n], atol=1e-6)
    # a different earlier token does change later log-probs (the mask is causal, not empty)
    assert np.abs(lp[2, 3:n] - lp[0, 3:n]).max() > 1e-4
