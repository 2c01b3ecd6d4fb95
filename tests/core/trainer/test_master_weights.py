"""fp32 master weights of a bf16 policy (``rft_core.trainer.master_weights``), what
``model.dtype: auto`` gives one CUDA trainer. Run here on CPU by asking for them there (bf16
matmuls run on CPU too); the H200 figures are in benchmarks/RESULTS.md."""

from __future__ import annotations

import pytest
import torch
from tiny_lm import build_tiny_model

from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
from rft_core.experience import Experience
from rft_core.trainer import models
from rft_core.trainer.policy import PolicyUpdater
from rft_core.trainer.token_losses import token_losses_backward


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture
def masters_on_cpu(monkeypatch):
    monkeypatch.setattr(models, "uses_master_weights", lambda explicit, device, sharded: True)


def experiences() -> list[Experience]:
    rows = [([40, 41, 42, 43], [9, 10, 11], 1.0), ([40, 41, 42, 43], [12, 13], -1.0)]
    rows += [([30, 31, 32], [36, 37, 38, 39], 0.5), ([50, 51], [52, 53, 54], -0.5)]
    return [
        Experience(prompt_ids=p, response_ids=r, logprobs=[-1.0] * len(r), reward=a, advantage=a)
        for p, r, a in rows
    ]


def trainer(model_dir: str, lr: float = 1e-3, micro_batch_size: int = 8) -> PolicyUpdater:
    algo = AlgorithmConfig(algorithm_type="grpo", optimizer=OptimizerConfig(lr=lr))
    return PolicyUpdater(model_dir, algo, micro_batch_size=micro_batch_size, seed=3)


def test_auto_on_cpu_keeps_fp32_parameters_and_no_masters(model_dir):
    t = trainer(model_dir)
    assert t.master is None
    assert {p.dtype for p in t.model.parameters()} == {torch.float32}


def test_the_policy_computes_in_bf16_and_steps_fp32_masters(model_dir, masters_on_cpu):
    t = trainer(model_dir)
    assert {p.dtype for p in t.model.parameters()} == {torch.bfloat16}
    assert {m.dtype for m in t.master.masters} == {torch.float32}
    before = [m.detach().clone() for m in t.master.masters]
    metrics = t.train_step(experiences())
    assert metrics["actor/grad_norm"] > 0
    moved = max(float((m - b).abs().max()) for m, b in zip(t.master.masters, before, strict=True))
    assert moved > 5e-4  # AdamW's first step moves weights by about lr
    for param, master in zip(t.master.params, t.master.masters, strict=True):
        assert torch.equal(param, master.to(torch.bfloat16))  # the model holds the rounded masters
        assert param.grad is None and master.grad is None  # both freed after the step


def test_updates_below_bf16_resolution_accumulate_in_the_masters(model_dir, masters_on_cpu):
    # lr 1e-6 on weights of ~0.02: bf16's spacing there is ~1.2e-4, so one update cannot move a
    # bf16 weight; three must still be in the fp32 masters
    t = trainer(model_dir, lr=1e-6)
    start_model = [p.detach().clone() for p in t.master.params]
    start_master = [m.detach().clone() for m in t.master.masters]
    for _ in range(3):
        t.train_step(experiences())
    master_changed = sum(
        int((m != s).sum()) for m, s in zip(t.master.masters, start_master, strict=True)
    )
    model_changed = sum(
        int((p != s).sum()) for p, s in zip(t.master.params, start_model, strict=True)
    )
    total = sum(m.numel() for m in t.master.masters)
    assert master_changed > 0.5 * total
    assert model_changed < 0.05 * total  # rounding hides them in the bf16 copy


def test_micro_batches_accumulate_in_fp32(model_dir, masters_on_cpu):
    grads = []
    for micro in (4, 1):  # one micro-batch, then four
        t = trainer(model_dir, micro_batch_size=micro)
        t.train_step(experiences())  # first step: the optimizer state exists afterwards
        t.optimizer.zero_grad(set_to_none=True)
        mbs = t.forward.micro_batches(experiences())
        assert len(mbs) == 4 // micro
        token_losses_backward(
            experiences(),
            t.policy_loss,
            t.algo,
            t.forward,
            model=t.model,
            ref_model=t.ref_model,
            critic=None,
            loss_horizon=None,
        )
        grads.append([m.grad.clone() for m in t.master.masters])
        assert all(p.grad is None for p in t.master.params)  # moved into the fp32 masters
    for one, four in zip(*grads, strict=True):
        assert one.dtype == torch.float32
        torch.testing.assert_close(four, one, atol=2e-3, rtol=5e-2)  # bf16 forwards differ


def test_a_checkpoint_resumes_from_the_fp32_masters_not_the_rounded_weights(
    model_dir, masters_on_cpu, tmp_path
):
    first = trainer(model_dir, lr=1e-6)
    first.train_step(experiences())
    first.save(tmp_path, 1, save_hf=False)
    resumed = trainer(model_dir, lr=1e-6)
    assert resumed.load(tmp_path, 1) == 1
    for got, want in zip(resumed.master.masters, first.master.masters, strict=True):
        assert torch.equal(got, want)
    for got, want in zip(resumed.master.params, first.master.params, strict=True):
        assert torch.equal(got, want)
    # the masters differ from their bf16 rounding: an equal result above means they were saved
    assert any(not torch.equal(m, m.to(torch.bfloat16).float()) for m in first.master.masters)
    # and the next step is the same on both
    a, b = first.train_step(experiences()), resumed.train_step(experiences())
    assert a["actor/pg_loss"] == pytest.approx(b["actor/pg_loss"], abs=1e-6)
    for got, want in zip(resumed.master.masters, first.master.masters, strict=True):
        assert torch.equal(got, want)
