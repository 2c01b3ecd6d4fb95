"""rft_core.trainer.token_head: the LM head's log-probs and entropies a chunk of tokens at a
time equal the full-logits formulas (values and gradients), and a model call through the
swapped head gives what the full logits give."""

from __future__ import annotations

import pytest
import torch
from tiny_lm import build_tiny_model

from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.modeling import token_logprobs
from rft_core.trainer.token_head import head_outputs, token_head


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunks_equal_the_full_logits_in_values_and_gradients(temperature):
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    coef = torch.randn(37, dtype=torch.float64)

    logits = hidden @ weight.T
    want_lp = token_logprobs(logits, targets, temperature).double()
    want_ent = entropy_from_logits(logits).double()
    (want_lp * coef + want_ent).sum().backward()
    want_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    # 37 tokens in chunks of 8: four full chunks and one of 5
    lp, ent = head_outputs(hidden, weight, None, targets, temperature, chunk_tokens=8)
    torch.testing.assert_close(lp.double(), want_lp, rtol=1e-6, atol=1e-6)  # fp32 inside
    # entropy is a sum of p * log p over logits of magnitude ~20: fp32 rounding is ~1e-5
    torch.testing.assert_close(ent.double(), want_ent, rtol=1e-5, atol=2e-5)
    (lp.double() * coef + ent.double()).sum().backward()
    for got, want in zip((hidden.grad, weight.grad), want_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=0, atol=1e-5)


def test_a_model_call_through_the_head_gives_the_plain_logits_outputs(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path))
    ids = torch.randint(3, 200, (3, 12))
    targets = ids[:, -4:]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -5:-1]
        with token_head(model, 0.5, chunk_tokens=5) as set_targets:
            plain = model(input_ids=ids, logits_to_keep=5).logits  # no targets: plain logits
            set_targets(targets)
            out = model(input_ids=ids, logits_to_keep=5).logits
    with torch.no_grad(), token_head(model, 0.5, chunk_tokens=5) as set_targets:
        set_targets(targets, with_entropy=False)
        alone = model(input_ids=ids, logits_to_keep=5).logits
    assert alone.shape == (3, 4, 1)
    torch.testing.assert_close(alone[..., 0], out[..., 0], atol=0, rtol=0)
    assert plain.shape[-1] == model.config.vocab_size
    assert out.shape == (3, 4, 2)
    torch.testing.assert_close(out[..., 0], token_logprobs(logits, targets, 0.5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[..., 1], entropy_from_logits(logits), atol=1e-5, rtol=0)
    assert "forward" not in vars(model.get_output_embeddings())  # the swap is undone
