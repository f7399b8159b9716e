"""HF-format import/export of Levanter policies through Levanter's `HFCheckpointConverter`, fully offline.

Export writes a standard HF folder: config.json (architectures e.g. ["LlamaForCausalLM"]), model.safetensors with
the usual names (model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ..., lm_head.weight; sharded
with an index for large models) and the tokenizer files. The converter normally copies `architectures` from a
reference checkpoint on the Hub; we point it at the config.json we have just written instead, so nothing downloads.
The folder is written next to its destination and renamed into place, so a crash never leaves a half export.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import haliax as hax
from levanter.compat.hf_checkpoints import HFCheckpointConverter
from levanter.models.llama import LlamaConfig
from levanter.models.lm_model import LmConfig, LmHeadModel
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from marin_rl.models.arrays import local_mesh, resolve_dtype

# HF architecture name written into config.json, keyed by the HF config's model_type.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
}


def lev_config_class_for_hf(model_type: str) -> type[LmConfig]:
    """Levanter config class for an HF `config.model_type` (error lists the supported ones)."""
    from levanter.models.mistral import MistralConfig
    from levanter.models.qwen import Qwen3Config, QwenConfig

    classes: dict[str, type[LmConfig]] = {
        "llama": LlamaConfig,
        "qwen2": QwenConfig,
        "qwen3": Qwen3Config,
        "mistral": MistralConfig,
    }
    if model_type not in classes:
        raise ValueError(f"HF model_type={model_type!r} is not supported; allowed: {sorted(classes)}")
    return classes[model_type]


def hf_lev_config(hf_path: str, max_seq_len: int) -> LmConfig:
    """Levanter config read from an HF config.json (repo id or local dir), with the context set to max_seq_len."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(hf_path)
    cls = lev_config_class_for_hf(hf_config.model_type)
    lev_config = cls.from_hf_config(hf_config)
    return dataclasses.replace(lev_config, seq_len=max_seq_len)


def hf_vocab_size(hf_path: str | Path) -> int:
    """The vocabulary size in an HF config.json (what import_hf keeps: HF models often pad it past the tokenizer)."""
    return int(AutoConfig.from_pretrained(str(hf_path)).vocab_size)


def export_hf(
    model: LmHeadModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    dtype: Any = None,
    overwrite: bool = False,
) -> Path:
    """Write `model` + `tokenizer` as an HF model folder at out_dir (weights cast to `dtype` if given)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise FileExistsError(
            f"export destination {out_dir} exists; pass overwrite=True (--overwrite) to replace it"
        )
    lev_config: LmConfig = model.config
    hf_config = lev_config.to_hf_config(vocab_size=model.Vocab.size)
    if hf_config.model_type not in ARCHITECTURES:
        raise ValueError(
            f"cannot export model_type={hf_config.model_type!r}; allowed: {sorted(ARCHITECTURES)}"
        )
    hf_config.architectures = [ARCHITECTURES[hf_config.model_type]]

    tmp = out_dir.with_name(out_dir.name + ".tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    hf_config.save_pretrained(tmp)  # the converter's "reference checkpoint": source of `architectures`
    converter = HFCheckpointConverter(
        type(lev_config), reference_checkpoint=str(tmp), HfConfigClass=type(hf_config), tokenizer=tokenizer
    )
    with hax.partitioning.set_mesh(local_mesh()):
        converter.save_pretrained(
            model,
            str(tmp),
            save_reference_code=False,
            save_tokenizer=True,
            dtype=None if dtype is None else resolve_dtype(dtype),
        )
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def import_hf(
    path: str | Path,
    *,
    lev_config: LmConfig | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    dtype: Any = "float32",
) -> LmHeadModel:
    """Levanter model from an HF folder or Hub repo id (config.json + safetensors); vocab size from config.json.

    lev_config: the Levanter config to build (defaults to the one derived from config.json; pass it to change the
    context length). tokenizer: defaults to the tokenizer saved at `path`.
    """
    path = str(path)
    hf_config = AutoConfig.from_pretrained(path)
    cls = lev_config_class_for_hf(hf_config.model_type)
    if lev_config is None:
        lev_config = cls.from_hf_config(hf_config)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(path)
    converter = HFCheckpointConverter(
        type(lev_config), reference_checkpoint=path, HfConfigClass=type(hf_config), tokenizer=tokenizer
    )
    # keep the checkpoint's vocab size (HF models often pad it past len(tokenizer)) so export round-trips exactly
    with hax.partitioning.set_mesh(local_mesh()):
        return converter.load_pretrained(
            lev_config.model_type,
            ref=path,
            config=lev_config,
            resize_vocab_to_match_tokenizer=False,
            dtype=resolve_dtype(dtype),
        )


def hf_state_dict(model: LmHeadModel) -> dict[str, Any]:
    """HF tensor name -> host array, the names and layouts `export_hf` writes (Levanter's own export mapping)."""
    from haliax.state_dict import to_torch_compatible_state_dict

    with hax.partitioning.set_mesh(local_mesh()):
        return to_torch_compatible_state_dict(model)
