"""A tiny random Qwen2 causal LM (hidden 64, 2 layers) with the demo's byte-level ChatML tokenizer, built in
a temporary directory with no download; shared by the rollout and policy-update tests."""

from __future__ import annotations

from pathlib import Path

import torch

# the tests' tiny Qwen2: 2 layers of 64, 4 query / 2 kv heads, tied embeddings (also the
# checkpoint tests' model: checkpoint_fixtures.tiny_config)
TINY_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)


def build_tokenizer():
    """The demo's byte-level ChatML tokenizer (one token per byte, ~260 tokens)."""
    from rft_core.demo import build_tokenizer as demo_tokenizer

    return demo_tokenizer()


def build_tiny_model(
    out_dir: Path, *, seed: int = 0, hidden: int = 64, layers: int = 2, **config: int
) -> Path:
    """Save a random Qwen2 model + tokenizer as a Hugging Face directory; return its path.
    ``config`` overrides Qwen2Config fields (heads, intermediate size, positions, ...)."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    settings = dict(
        TINY_SHAPE,
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model_config = Qwen2Config(**{**settings, **config})
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
