"""Build the policy network: a tiny Levanter Llama from `ModelConfig` fields, or an HF checkpoint via Levanter.

`build_policy(model_cfg, key)` -> (model, tokenizer, lev_config). The model is a Levanter `LmHeadModel`
(`LlamaLMHeadModel`, or `QwenLMHeadModel` for Qwen checkpoints) with a haliax "vocab" axis sized to the tokenizer.
`model_cfg.init_checkpoint` (a marin-rl checkpoint folder or an HF export folder) replaces the initial weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import equinox as eqx
import haliax as hax
import jax
from levanter.layers.attention import AttentionBackend
from levanter.models.llama import LlamaConfig
from levanter.models.lm_model import LmConfig, LmHeadModel
from transformers import PreTrainedTokenizerBase

from marin_rl.config.spec import ModelConfig
from marin_rl.models.arrays import cast_floating, resolve_dtype
from marin_rl.models.hf_io import hf_lev_config, hf_vocab_size, import_hf
from marin_rl.models.tokenizer import load_tokenizer
from marin_rl.training import checkpoint as ckpt

VOCAB_AXIS = "vocab"

def tiny_lev_config(model_cfg: ModelConfig) -> LlamaConfig:
    """The Levanter LlamaConfig of a kind=tiny ModelConfig (no remat: activations are tiny, speed matters on CPU)."""
    return LlamaConfig(
        seq_len=model_cfg.max_seq_len,
        hidden_dim=model_cfg.hidden_dim,
        intermediate_dim=model_cfg.intermediate_dim,
        num_layers=model_cfg.num_layers,
        num_heads=model_cfg.num_heads,
        num_kv_heads=model_cfg.num_kv_heads,
        gradient_checkpointing=False,
        tie_word_embeddings=False,
        # plain softmax attention: at <= a few hundred positions it compiles ~2x faster on the CPU than Levanter's
        # default there (the blockwise JAX flash reference) and runs as fast
        attn_backend=AttentionBackend.VANILLA,
    )


@eqx.filter_jit  # one compiled init instead of hundreds of eager ops (2x faster on CPU)
def init_tiny_model(lev_config: LlamaConfig, vocab_size: int, key: jax.Array) -> LmHeadModel:
    """Randomly initialised Levanter Llama with a `vocab` axis of `vocab_size`."""
    return lev_config.build(hax.Axis(VOCAB_AXIS, vocab_size), key=key)


def build_policy(
    model_cfg: ModelConfig, key: jax.Array, *, dtype: Any = "float32"
) -> tuple[LmHeadModel, PreTrainedTokenizerBase, LmConfig]:
    """(model, tokenizer, lev_config) for a ModelConfig; weights from model_cfg.init_checkpoint when it is set.

    kind=tiny: a fresh LlamaConfig built from the ModelConfig fields, vocab = len(char tokenizer).
    kind=hf: config + weights from model_cfg.hf_path through Levanter's HFCheckpointConverter (local dirs offline).
    """
    tokenizer = load_tokenizer(model_cfg)
    dtype = resolve_dtype(dtype)
    if model_cfg.kind == "tiny":
        lev_config = tiny_lev_config(model_cfg)
        if model_cfg.init_checkpoint:
            model = load_weights(
                model_cfg.init_checkpoint, lev_config, len(tokenizer), tokenizer, dtype=dtype
            )
        else:
            model = init_tiny_model(lev_config, len(tokenizer), key)
    else:
        assert model_cfg.hf_path is not None  # checked by ModelConfig
        lev_config = hf_lev_config(model_cfg.hf_path, model_cfg.max_seq_len)
        if model_cfg.init_checkpoint:
            model = load_weights(
                model_cfg.init_checkpoint, lev_config, len(tokenizer), tokenizer, dtype=dtype
            )
        else:
            model = import_hf(model_cfg.hf_path, lev_config=lev_config, tokenizer=tokenizer, dtype=dtype)
    return cast_floating(model, dtype), tokenizer, lev_config


def load_weights(
    path: str | Path,
    lev_config: LmConfig,
    vocab_size: int,
    tokenizer: PreTrainedTokenizerBase,
    *,
    dtype: Any = "float32",
) -> LmHeadModel:
    """Weights of `lev_config`'s shape from a marin-rl checkpoint folder or an HF export folder (config.json)."""
    path = Path(path)
    if ckpt.is_checkpoint(path):
        vocab_size = ckpt.checkpoint_vocab_size(path) or vocab_size
        template = eqx.filter_eval_shape(model_template, lev_config, vocab_size)
        return cast_floating(ckpt.restore_model(path, template), dtype)
    if (path / "config.json").exists():
        return import_hf(path, lev_config=lev_config, tokenizer=tokenizer, dtype=dtype)
    raise FileNotFoundError(
        f"model.init_checkpoint={str(path)!r} is neither a marin-rl checkpoint folder (with "
        f"{ckpt.COMPLETE_MARKER}) nor an HF model folder (with config.json)"
    )


def policy_structure(model_cfg: ModelConfig) -> tuple[LmHeadModel, PreTrainedTokenizerBase]:
    """(the policy's module tree with shapes and dtypes but no weights, tokenizer): what a rollout worker holds
    until the first weights arrive. eqx.filter_eval_shape builds it without materialising a single array."""
    tokenizer = load_tokenizer(model_cfg)
    if model_cfg.kind == "tiny":
        lev_config, vocab_size = tiny_lev_config(model_cfg), len(tokenizer)
    else:
        assert model_cfg.hf_path is not None  # checked by ModelConfig
        lev_config = hf_lev_config(model_cfg.hf_path, model_cfg.max_seq_len)
        vocab_size = hf_vocab_size(model_cfg.hf_path)
    if model_cfg.init_checkpoint and ckpt.is_checkpoint(model_cfg.init_checkpoint):
        vocab_size = ckpt.checkpoint_vocab_size(model_cfg.init_checkpoint) or vocab_size
    return eqx.filter_eval_shape(model_template, lev_config, vocab_size), tokenizer


def model_template(lev_config: LmConfig, vocab_size: int) -> LmHeadModel:
    """Model of `lev_config` (any Levanter LM config) with a fixed key: the shape template for restores."""
    return lev_config.build(hax.Axis(VOCAB_AXIS, vocab_size), key=jax.random.PRNGKey(0))


def load_policy_from_checkpoint(
    path: str | Path, model_cfg: ModelConfig | None = None, *, dtype: Any = "float32"
) -> tuple[LmHeadModel, PreTrainedTokenizerBase, LmConfig]:
    """(model, tokenizer, lev_config) from a marin-rl checkpoint (its model_config.json is used when model_cfg is None)
    or from an HF export folder (model_cfg None -> kind=hf with hf_path=path)."""
    path = Path(path)
    if model_cfg is None:
        if ckpt.is_checkpoint(path):
            model_cfg = ckpt.read_model_config(path)
        elif (path / "config.json").exists():
            model_cfg = ModelConfig(
                name=path.name, kind="hf", hf_path=str(path), max_seq_len=_hf_context(path)
            )
        else:
            raise FileNotFoundError(f"{path} is neither a marin-rl checkpoint nor an HF model folder")
    model_cfg = model_cfg.model_copy(update={"init_checkpoint": str(path)})
    return build_policy(model_cfg, jax.random.PRNGKey(0), dtype=dtype)


def _hf_context(path: Path) -> int:
    import json

    cfg = json.loads((path / "config.json").read_text())
    return int(cfg.get("max_position_embeddings", 2048))


def count_params(model: Any) -> int:
    """Number of floating-point parameters in a model."""
    leaves = jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    return int(sum(x.size for x in leaves))
