"""Tokenizers: the tiny model's character-level tokenizer, and HF tokenizers for real checkpoints.

The character tokenizer is a real `tokenizers` fast tokenizer (one WordLevel token per character, a pre-tokenizer
that isolates every character, a Fuse decoder that joins them back), wrapped in `PreTrainedTokenizerFast`, so
`save_pretrained` writes files that `AutoTokenizer.from_pretrained(dir)` loads without custom code.

Like Llama tokenizers, it prepends <bos> when `add_special_tokens=True` (the default of `tokenizer(text)`); pass
`add_special_tokens=False` for raw characters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

if TYPE_CHECKING:
    from marin_rl.config.spec import ModelConfig

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0..3: pad id 0 so zero-filled buffers are padding
# Printable ASCII (space .. tilde) plus newline: everything the mock/math envs need to write.
CHARACTERS = tuple(chr(c) for c in range(32, 127)) + ("\n",)


def char_vocab() -> dict[str, int]:
    """Token -> id: the four special tokens first, then one id per character."""
    return {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer of the tiny model (vocab = 4 special tokens + 96 characters = 100)."""
    vocab = char_vocab()
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # "[\s\S]" matches any single character, newline included; "isolated" keeps each as its own piece.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # concatenate pieces (the default decoder would join them with spaces)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,  # " ." must decode to " ." (characters are data here)
        padding_side="right",
        model_max_length=1 << 30,
    )


def load_tokenizer(model_cfg: "ModelConfig") -> PreTrainedTokenizerBase:
    """The tokenizer of a model config: the char tokenizer for kind=tiny, else AutoTokenizer(tokenizer or hf_path).

    `model_cfg.tokenizer` may point at a saved tokenizer directory for either kind (local dirs load offline).
    """
    if model_cfg.tokenizer:
        return AutoTokenizer.from_pretrained(model_cfg.tokenizer)
    if model_cfg.kind == "tiny":
        return build_char_tokenizer()
    if not model_cfg.hf_path:
        raise ValueError("model.hf_path must be set to load a tokenizer when model.kind=hf")
    tok = AutoTokenizer.from_pretrained(model_cfg.hf_path)
    if tok.pad_token_id is None:
        # Llama-3 ships without a pad token; padding positions are masked out everywhere, so EOS is a safe filler.
        tok.pad_token = tok.eos_token
    return tok
