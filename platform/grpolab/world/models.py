"""Tiny causal LMs built from a transformers config: nothing is downloaded.

Presets are named by size; ``build_model`` returns a randomly initialised Llama-family model
whose vocabulary matches the local character tokenizer. ``save_model`` writes model and
tokenizer with ``save_pretrained`` so every later load (TRL's reference model included) comes
from a local directory.
"""

from __future__ import annotations

from pathlib import Path

from grpolab.errors import ConfigError
from grpolab.world.tokenizer import build_char_tokenizer

# preset -> (hidden, layers, heads, intermediate); parameter counts with the 57-token vocab:
# tiny ~0.1 M, small ~2 M, medium ~20 M.
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "tiny": (64, 2, 4, 128),
    "small": (192, 4, 6, 512),
    "medium": (512, 6, 8, 1376),
}


def preset_config(preset: str, vocab_size: int, max_positions: int = 256):
    """A transformers LlamaConfig (imported here: transformers' config classes import torch, which
    validating a config, e.g. a study's coordinator, does not need)."""
    from transformers import LlamaConfig
    if preset not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    hidden, layers, heads, inter = PRESETS[preset]
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, intermediate_size=inter, max_position_embeddings=max_positions,
        tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )


def build_model(preset: str, seed: int):
    """A fresh model and the tokenizer it pairs with, initialised deterministically from seed."""
    tokenizer = build_char_tokenizer()
    config = preset_config(preset, len(tokenizer))
    import torch  # lazy here and below: validating a config (a study's coordinator) needs no torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_model(model, tokenizer, directory: Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def load_model(directory: Path):
    directory = Path(directory)
    if not (directory / "config.json").exists():
        raise ConfigError(f"model.path: {str(directory)!r} is not a local model directory (no config.json)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    return model, tokenizer
