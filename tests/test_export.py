"""HF export/import: standard names and config, transformers can read config + tokenizer, exact round trip."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file
from tiny_policy import MODEL, tiny_model, tiny_trainer
from transformers import AutoConfig, AutoTokenizer

from marin_rl.config.spec import ModelConfig
from marin_rl.models.hf_io import import_hf, lev_config_class_for_hf
from marin_rl.models.policy import build_policy, load_policy_from_checkpoint
from marin_rl.training import checkpoint as ckpt
from marin_rl.training.export import main as export_main
from marin_rl.training.export import resolve_checkpoint
from marin_rl.training.export_target import UnsafeExportTarget


def arrays(model):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(model, eqx.is_array))]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model, tokenizer, _ = tiny_model()
    # perturb so the export is not just the deterministic init
    model = jax.tree.map(lambda x: x + 0.01 if eqx.is_inexact_array(x) else x, model)
    run = tmp_path_factory.mktemp("run")
    state = tiny_trainer(None).init_state(model)
    ckpt.save_checkpoint(ckpt.checkpoint_path(run / "checkpoints", 0), state, {}, model_config=MODEL)
    out = tmp_path_factory.mktemp("export") / "hf"
    export_main(["--checkpoint", str(run), "--out", str(out)])
    return model, tokenizer, run, out


def test_export_writes_standard_hf_folder(exported):
    model, tokenizer, _, out = exported
    config = AutoConfig.from_pretrained(out)
    assert config.architectures == ["LlamaForCausalLM"] and config.model_type == "llama"
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (32, 2, len(tokenizer))
    assert (config.eos_token_id, config.pad_token_id) == (tokenizer.eos_token_id, tokenizer.pad_token_id)
    weights = load_file(out / "model.safetensors")
    for name, shape in {
        "model.embed_tokens.weight": (100, 32),
        "model.layers.0.self_attn.q_proj.weight": (32, 32),
        "model.layers.1.mlp.down_proj.weight": (32, 64),
        "model.norm.weight": (32,),
        "lm_head.weight": (100, 32),
    }.items():
        assert weights[name].shape == shape, name
    np.testing.assert_array_equal(
        weights["model.embed_tokens.weight"], model.embeddings.token_embeddings.weight.array
    )
    np.testing.assert_array_equal(weights["lm_head.weight"], model.lm_head.weight.array)
    hf_tok = AutoTokenizer.from_pretrained(out)
    assert hf_tok("Q: 2+2\nA: 4").input_ids == tokenizer("Q: 2+2\nA: 4").input_ids


def test_import_round_trips_weights_exactly(exported):
    model, _, run, out = exported
    for loaded in (
        import_hf(out),
        load_policy_from_checkpoint(out)[0],
        load_policy_from_checkpoint(run / "checkpoints" / "step-0000000")[0],
        build_policy(MODEL.model_copy(update={"init_checkpoint": str(out)}), jax.random.PRNGKey(1))[0],
        build_policy(
            ModelConfig(name="local-hf", kind="hf", hf_path=str(out), max_seq_len=64), jax.random.PRNGKey(0)
        )[0],
    ):
        assert all(np.array_equal(a, b) for a, b in zip(arrays(loaded), arrays(model), strict=True))


def test_export_errors_are_clear(exported, tmp_path):
    _, _, run, out = exported
    with pytest.raises(FileExistsError, match="overwrite"):
        export_main(["--checkpoint", str(run), "--out", str(out)])
    with pytest.raises(FileNotFoundError, match="no finished marin-rl checkpoint"):
        resolve_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="allowed"):
        lev_config_class_for_hf("gpt_neox")


def test_export_refuses_to_write_onto_around_or_into_its_source(exported, tmp_path):
    _, _, run, _ = exported
    step = run / "checkpoints" / "step-0000000"
    other_run = tmp_path / "other"
    (other_run / "checkpoints").mkdir(parents=True)
    for source, out, relation in [
        (run, run, "is the checkpoint's run folder"),
        (step, step, "is the checkpoint"),
        (run, run.parent, "contains the checkpoint "),
        (step, run / "hf", "lies inside the checkpoint's run folder"),
        (run, other_run / "hf", f"lies inside the run folder {other_run}"),
        (run, tmp_path, f"contains the run folder {other_run}"),
    ]:
        with pytest.raises(UnsafeExportTarget, match=relation):
            export_main(["--checkpoint", str(source), "--out", str(out), "--overwrite"])
    assert ckpt.latest_checkpoint(run / "checkpoints") == step  # the source is intact
