"""Real tiny Qwen2 models and a byte-level BPE tokenizer with a chat template, built in-process
(no download) for the checkpoint and convert tests."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_lm import TINY_SHAPE
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "What is 12 plus 30? <think>12 + 30 = 42</think><answer>42</answer>",
    "Natalia sold clips to 48 of her friends in April. #### 72",
    "system user assistant You are a helpful assistant.",
] * 20


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )


def tiny_config(vocab_size: int, *, larger: bool = False) -> Qwen2Config:
    """The tests' tiny Qwen2 (``tiny_lm.TINY_SHAPE``: 2 layers, 4 query / 2 kv heads, tied
    embeddings); ``larger``: 3 layers, 8 / 2 heads, untied output layer, an intermediate size
    that is not a power of two."""
    sizes = dict(TINY_SHAPE)
    if larger:
        sizes.update(
            hidden_size=128,
            intermediate_size=352,
            num_hidden_layers=3,
            num_attention_heads=8,
            tie_word_embeddings=False,
        )
    return Qwen2Config(vocab_size=vocab_size, dtype="float32", **sizes)


def build_model(config: Qwen2Config, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # biases start at zero; make them count in the round trip
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def tiny_model_fixtures():
    """The tiny model (``tiny_config``, seed 0) and its tokenizer as module-scoped fixtures, for
    a test module to bind by their names: ``tokenizer, model = tiny_model_fixtures()``."""
    import pytest  # not at the top: the FSDP writer processes import this module too

    @pytest.fixture(scope="module")
    def tokenizer():
        return build_tokenizer()

    @pytest.fixture(scope="module")
    def model(tokenizer):
        return build_model(tiny_config(len(tokenizer)))

    return tokenizer, model


def logits_of(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast) -> torch.Tensor:
    ids = tokenizer("What is 12 plus 30? #### 42", return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits


def chat_generate(model_dir: Path) -> str:
    """Load tokenizer and model from a converted directory and generate through the chat
    template; returns the decoded continuation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 12 plus 30?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    return tok.decode(out[0, ids["input_ids"].shape[1] :])
