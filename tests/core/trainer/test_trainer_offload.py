"""Optimizer-state offload for colocate (``rft_core.trainer.offload``): a step after the state's
round trip through host memory equals a step without it."""

from __future__ import annotations

import torch
from tiny_lm import build_tiny_model

from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
from rft_core.experience import Experience
from rft_core.trainer.offload import offload_optimizer_state, reload_optimizer_state
from rft_core.trainer.policy import PolicyUpdater


def batch() -> list[Experience]:
    return [
        Experience(prompt_ids=[5, 6, 7], response_ids=[8, 9, 10], logprobs=[], advantage=a)
        for a in (1.0, -1.0)
    ] + [Experience(prompt_ids=[11, 12], response_ids=[13], logprobs=[], advantage=0.5)]


def test_a_step_after_offload_and_reload_equals_a_step_without(tmp_path):
    model_dir = build_tiny_model(tmp_path)
    algo = AlgorithmConfig(algorithm_type="grpo", optimizer=OptimizerConfig(lr=1e-2))
    plain, offloaded = (PolicyUpdater(str(model_dir), algo, micro_batch_size=2) for _ in "ab")
    for trainer in (plain, offloaded):
        trainer.train_step(batch())  # AdamW now holds moments and a step count
    state = offloaded.optimizer.state
    originals = [v for s in state.values() for v in s.values()]
    moved, device = offload_optimizer_state(offloaded.optimizer)
    # every moment and step count moved: fresh tensors with the same values
    assert len(moved) == 3 * len(state) == len(originals) and device == "cpu"
    copies = [v for s in state.values() for v in s.values()]
    for original, copy in zip(originals, copies, strict=True):
        assert copy is not original and torch.equal(copy, original)
    reload_optimizer_state(offloaded.optimizer, moved, device)
    for trainer in (plain, offloaded):
        trainer.offload_optimizer()  # a no-op on a CPU trainer
        trainer.reload_optimizer()
        trainer.train_step(batch())
    for (name, p), q in zip(
        plain.model.named_parameters(), offloaded.model.parameters(), strict=True
    ):
        torch.testing.assert_close(q, p, atol=0, rtol=0, msg=name)
    # and the second step did move the weights (the comparison is not of two untouched models)
    fresh = PolicyUpdater(str(model_dir), algo, micro_batch_size=2)
    moved_weights = [
        not torch.equal(p, q)
        for p, q in zip(plain.model.parameters(), fresh.model.parameters(), strict=True)
    ]
    assert all(moved_weights)
