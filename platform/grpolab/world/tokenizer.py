"""A character-level tokenizer built locally, so no tokenizer is ever downloaded.

Every printable character the toy tasks use is one token; ``<pad>``, ``<bos>`` and ``<eos>``
are specials. The tokenizer is a real ``PreTrainedTokenizerFast`` so TRL, generation and
``save_pretrained`` treat it exactly like a hub tokenizer.
"""

from __future__ import annotations

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
# Digits, arithmetic, separators and lower-case letters cover every toy task's prompts and
# completions (scratchpads use letters and punctuation).
CHARACTERS = list("0123456789+-*/=:;,.()# ") + list("abcdefghijklmnopqrstuvwxyz") + list("ACST")


def build_char_tokenizer():
    """A transformers PreTrainedTokenizerFast over SPECIALS + CHARACTERS (imported here:
    transformers' tokenizer classes import torch, which validating a config does not need)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Split every character into its own piece (spaces included) and glue them back on decode.
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
    )
    tokenizer.padding_side = "left"  # generation pads prompts on the left
    return tokenizer
