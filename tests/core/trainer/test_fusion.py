"""``trainer.use_torch_compile`` (``rft_core.trainer.fusion``): the compiled decoder gives the
eager decoder's log-probs, gradients and optimizer step, on the padded and the shared-prompt
layouts, at both scopes. Compiled with inductor on CPU here (fp32); the CUDA figures are in
benchmarks/RESULTS.md."""

from __future__ import annotations

import pytest
import torch
from tiny_lm import build_tiny_model

from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
from rft_core.experience import Experience
from rft_core.trainer.chunked_logprobs import chunked_token_scores
from rft_core.trainer.fusion import compile_model, wants_compile
from rft_core.trainer.policy import PolicyUpdater


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def experiences() -> list[Experience]:
    """A group of two responses to one prompt (the shared-prompt layout) and a lone row."""
    prompt = list(range(40, 52))
    rows = [(prompt, [9, 10, 11]), (prompt, [12, 13]), ([30, 31, 32, 33], [36, 37, 38, 39])]
    return [
        Experience(
            prompt_ids=p,
            response_ids=r,
            logprobs=[-1.0] * len(r),
            reward=0.0,
            advantage=a,
            group_id="g",
        )
        for (p, r), a in zip(rows, [1.0, -1.0, 0.5], strict=True)
    ]


def trainer(model_dir: str, compiled: bool, scope: str = "parts") -> PolicyUpdater:
    algo = AlgorithmConfig(algorithm_type="grpo", optimizer=OptimizerConfig(lr=1e-3))
    return PolicyUpdater(
        model_dir,
        algo,
        micro_batch_size=8,
        seed=3,
        use_torch_compile=compiled,
        compile_scope=scope,
    )


def test_compile_is_on_for_cuda_only_unless_the_config_says():
    assert wants_compile(None, torch.device("cuda")) is True
    assert wants_compile(None, torch.device("cpu")) is False
    assert wants_compile(True, torch.device("cpu")) is True
    assert wants_compile(False, torch.device("cuda")) is False


def test_the_parts_scope_compiles_each_layers_norms_and_mlp(model_dir):
    eager = trainer(model_dir, compiled=False)
    layers = eager.model.model.layers
    # two norms and the MLP per layer, and the final norm
    assert compile_model(eager.model, "parts") == 3 * len(layers) + 1
    assert layers[0].mlp._compiled_call_impl is not None
    assert getattr(layers[0].self_attn, "_compiled_call_impl", None) is None
    with pytest.raises(ValueError, match="compile scope must be one of"):
        compile_model(eager.model, "everything")


@pytest.mark.parametrize("scope", ["parts", "layers"])
@pytest.mark.parametrize("share_prefix", [True, False])
def test_the_compiled_decoder_gives_the_eager_logprobs_and_gradients(
    model_dir, scope, share_prefix
):
    results = []
    for compiled in (False, True):
        t = trainer(model_dir, compiled, scope)
        t.forward.share_prompt_prefix = share_prefix
        (mb,) = t.forward.micro_batches(experiences())
        t.model.train()
        logp, entropy = t.forward.logprobs(t.model, mb, entropy=True, entropy_grad=True)
        weights = torch.linspace(-1.0, 1.0, mb.mask.numel()).view_as(mb.mask) * mb.mask
        loss = (weights * logp).sum() + (0.3 * weights * entropy).sum()
        params = [p for p in t.model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params)
        results.append((logp[mb.mask.bool()], float(loss), grads))
    (eager_logp, eager_loss, eager_grads), (logp, loss, grads) = results
    torch.testing.assert_close(logp, eager_logp, atol=1e-5, rtol=1e-5)
    assert loss == pytest.approx(eager_loss, abs=1e-5)
    for got, want in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # the logits' gradient is not zero: the comparison is of something
    assert max(float(g.abs().max()) for g in eager_grads) > 1e-4


def test_a_compiled_train_step_equals_the_eager_one(model_dir):
    steps = []
    for compiled in (False, True):
        t = trainer(model_dir, compiled)
        metrics = t.train_step(experiences())
        steps.append((metrics, [p.detach().clone() for p in t.model.parameters()]))
    (eager_metrics, eager_params), (metrics, params) = steps
    assert metrics["actor/pg_loss"] == pytest.approx(eager_metrics["actor/pg_loss"], abs=1e-5)
    assert metrics["actor/grad_norm"] == pytest.approx(eager_metrics["actor/grad_norm"], rel=1e-4)
    assert eager_metrics["actor/grad_norm"] > 0
    # AdamW's first step moves each weight by about lr = 1e-3 whatever the gradient's size, so
    # a gradient rounded differently moves a weight with a near-zero gradient by a few 1e-6
    initial = [p.detach() for p in trainer(model_dir, compiled=False).model.parameters()]
    moved = max(float((p - q).abs().max()) for p, q in zip(eager_params, initial, strict=True))
    assert moved > 5e-4
    for got, want in zip(params, eager_params, strict=True):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("entropy_grad", [True, False])
def test_the_fused_head_gives_the_eager_head_scores_and_gradients(entropy_grad):
    torch.manual_seed(4)
    hidden = torch.randn(11, 16, requires_grad=True)
    weight = torch.randn(70, 16, requires_grad=True)
    bias = torch.randn(70, requires_grad=True)
    targets = torch.randint(0, 70, (11,))
    a, c = torch.randn(11), torch.randn(11)
    results = []
    for fused in (False, True):
        logp, entropy, _ = chunked_token_scores(
            hidden, weight, bias, targets, temperature=0.7, chunk_tokens=4, fused=fused
        )
        loss = (a * logp).sum() + ((c * entropy).sum() if entropy_grad else 0.0)
        grads = torch.autograd.grad(loss, [hidden, weight, bias])
        results.append((logp.detach(), entropy.detach(), grads))
    (eager_logp, eager_entropy, eager_grads), (logp, entropy, grads) = results
    torch.testing.assert_close(logp, eager_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, eager_entropy, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert float(eager_grads[1].abs().max()) > 1e-3
