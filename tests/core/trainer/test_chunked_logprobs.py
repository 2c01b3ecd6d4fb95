"""Chunked log-probs and entropy (``rft_core.trainer.chunked_logprobs``) against the full-logits
formula (``token_logprobs``, ``entropy_from_logits``), values and gradients, fp32 on CPU; and the
trainer's forward on every layout (padded, packed, shared prefix) against the full logits."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_lm import build_tiny_model

from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
from rft_core.experience import Experience
from rft_core.modeling import token_logprobs
from rft_core.trainer.chunked_logprobs import chunked_token_scores
from rft_core.trainer.policy import PolicyUpdater


def test_a_hand_worked_logprob_and_entropy():
    # logits [1, 0, -1]: logsumexp = log(e + 1 + 1/e) = log(4.0862) = 1.40761
    # logp(token 0) = 1 - 1.40761 = -0.40761; p = [0.66524, 0.24473, 0.09003]
    # H = 1.40761 - (0.66524 * 1 + 0.09003 * -1) = 1.40761 - 0.57521 = 0.83240
    hidden = torch.tensor([[1.0, 0.0]])
    weight = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    logp, entropy, _ = chunked_token_scores(hidden, weight, None, torch.tensor([0]))
    assert logp.item() == pytest.approx(-0.40761, abs=1e-5)
    assert entropy.item() == pytest.approx(0.83240, abs=1e-5)
    # temperature 2 halves the logits: [0.5, 0, -0.5], lse = log(1.64872 + 1 + 0.60653) = 1.18027
    logp, _, _ = chunked_token_scores(hidden, weight, None, torch.tensor([2]), temperature=2.0)
    assert logp.item() == pytest.approx(-0.5 - 1.18027, abs=1e-5)


def _full(hidden, weight, bias, targets, temperature):
    """The full-logits formula, in fp64: the chunked fp32 result must be as close to it."""
    as64 = [x.double() if x is not None else None for x in (hidden, weight, bias)]
    logits = torch.nn.functional.linear(*as64)
    logp = torch.log_softmax(logits / temperature, -1).gather(-1, targets[..., None])[..., 0]
    return logp, entropy_from_logits(logits.float() / temperature)


@pytest.mark.parametrize("chunk_tokens", [1, 4, 5, 64])  # 5 does not divide the 14 tokens
@pytest.mark.parametrize("with_bias", [False, True])
def test_chunked_scores_and_gradients_equal_the_full_logits(chunk_tokens, with_bias):
    torch.manual_seed(0)
    hidden = torch.randn(2, 7, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    bias = torch.randn(50, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 50, (2, 7))
    a, c = torch.randn(2, 7), torch.randn(2, 7)  # arbitrary weights of the two outputs
    inputs = [hidden, weight] + ([bias] if with_bias else [])

    logp, entropy, _ = chunked_token_scores(
        hidden, weight, bias, targets, temperature=0.7, chunk_tokens=chunk_tokens
    )
    grads = torch.autograd.grad((a * logp).sum() + (c * entropy).sum(), inputs)
    ref_logp, ref_entropy = _full(hidden, weight, bias, targets, 0.7)
    ref_grads = torch.autograd.grad((a * ref_logp).sum() + (c * ref_entropy).sum(), inputs)

    torch.testing.assert_close(logp, ref_logp.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy.float(), atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-4)


def test_a_detached_entropy_leaves_the_logprob_gradient_alone():
    torch.manual_seed(1)
    hidden = torch.randn(9, 8, requires_grad=True)
    weight = torch.randn(30, 8, requires_grad=True)
    targets = torch.randint(0, 30, (9,))
    logp, entropy, _ = chunked_token_scores(hidden, weight, None, targets, chunk_tokens=4)
    (grad,) = torch.autograd.grad(logp.sum() + 0 * entropy.detach().sum(), [hidden])
    ref_logp, _ = _full(hidden, weight, None, targets, 1.0)
    (ref_grad,) = torch.autograd.grad(ref_logp.sum(), [hidden])
    torch.testing.assert_close(grad, ref_grad.float(), atol=1e-5, rtol=1e-4)
    _, none, _ = chunked_token_scores(hidden, weight, None, targets, with_entropy=False)
    assert none is None


@pytest.fixture(scope="module", params=["tied", "untied"])
def model_dir(request, tmp_path_factory):
    tie = request.param == "tied"
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny"), tie_word_embeddings=tie))


def experiences() -> list[Experience]:
    """Two groups of two responses of different lengths to one prompt each, and a lone row."""
    first, second = list(range(40, 52)), list(range(60, 70))  # 12- and 10-token prompts
    rows = [
        (first, [9, 10, 11]),
        (first, [12]),
        (second, [22, 23, 24, 25, 26]),
        (second, [27, 28]),
        ([30, 31, 32, 33, 34, 35], [36, 37]),
    ]
    return [
        Experience(prompt_ids=p, response_ids=r, logprobs=[], reward=0.0, advantage=1.0)
        for p, r in rows
    ]


def trainer(model_dir: str, **kwargs) -> PolicyUpdater:
    algo = AlgorithmConfig(algorithm_type="grpo", optimizer=OptimizerConfig(lr=1e-3))
    return PolicyUpdater(model_dir, algo, temperature=0.7, micro_batch_size=8, **kwargs)


def full_logits_reference(t: PolicyUpdater, mb) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula before chunking: [B, R, V] logits held whole, on the padded layout."""
    logits = t.model(
        input_ids=mb.input_ids,
        attention_mask=mb.attention_mask,
        position_ids=mb.position_ids,
        use_cache=False,
        logits_to_keep=mb.response_width + 1,
    ).logits[:, :-1]
    return token_logprobs(logits, mb.targets, 0.7), entropy_from_logits(logits.float() / 0.7)


def scored_loss_and_grads(logp, entropy, mb, params):
    # arbitrary per-token weights, masked: padding positions must not matter
    a = torch.linspace(-1.0, 1.0, mb.mask.numel()).view_as(mb.mask) * mb.mask
    loss = (a * logp).sum() + (0.3 * a * entropy).sum()
    return loss, torch.autograd.grad(loss, params)


@pytest.mark.parametrize("layout", ["padded", "packed", "shared-prefix"])
def test_the_trainer_forward_equals_the_full_logits_on_every_layout(model_dir, layout):
    t = trainer(model_dir, use_remove_padding=layout == "packed")
    t.forward.share_prompt_prefix = layout == "shared-prefix"
    t.forward.logprob_chunk_tokens = 3  # several chunks, the last one short
    (mb,) = t.forward.micro_batches(experiences())
    assert (mb.packed is not None) == (layout == "packed")
    assert (mb.shared_prefix is not None) is True  # prompts repeat: the layout exists
    params = [p for p in t.model.parameters() if p.requires_grad]
    t.model.train()

    logp, entropy = t.forward.logprobs(t.model, mb, entropy=True, entropy_grad=True)
    loss, grads = scored_loss_and_grads(logp, entropy, mb, params)
    ref_logp, ref_entropy = full_logits_reference(t, mb)
    ref_loss, ref_grads = scored_loss_and_grads(ref_logp, ref_entropy, mb, params)

    on = mb.mask.bool()
    torch.testing.assert_close(logp[on], ref_logp[on], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy[on], ref_entropy[on], atol=1e-5, rtol=1e-5)
    assert float(loss) == pytest.approx(float(ref_loss), abs=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # entropy lies in [0, log V]
    assert 0 < float(entropy[on].min()) and float(entropy[on].max()) < math.log(len(t.tokenizer))


def test_top1_marks_the_tokens_the_head_ranks_first():
    # logits [1, 0, -1] for each of 3 tokens: token 0 is the most likely one, whatever the
    # temperature; targets 0, 1, 0 -> hits 1, 0, 1 (over two chunks)
    hidden = torch.tensor([[1.0, 0.0]] * 3)
    weight = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    targets = torch.tensor([0, 1, 0])
    _, _, top1 = chunked_token_scores(
        hidden, weight, None, targets, temperature=0.5, chunk_tokens=2, with_top1=True
    )
    assert top1.tolist() == [1.0, 0.0, 1.0]
    _, _, none = chunked_token_scores(hidden, weight, None, targets)
    assert none is None
