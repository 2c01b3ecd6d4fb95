"""Data-parallel trainer ranks (``trainer.world_size``): two FSDP2 ranks over gloo in Ray actors
take the same optimizer step as one process on the whole batch, save the seed's sharded tree,
and resume across world sizes. A tiny random Qwen2 on CPU (the GPU path differs only in the
NCCL backend and bf16 parameters)."""

from __future__ import annotations

import json

import pytest
import ray
import torch
from policy_rollouts import algorithm, rollout
from tiny_lm import build_tiny_model

from rft_core.checkpoint.store import load_checkpoint
from rft_core.experience import Experience
from rft_core.trainer.policy import PolicyUpdater
from rft_core.trainer.ranks import TrainerRanks, merge_metrics, shard_experiences


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def _weights(policy) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in policy.state_dict_for_sync().items()}


def _uneven_batch(model_dir: str) -> list[Experience]:
    # 3 groups of 3: the ranks get 2 groups (6 rows) and 1 group (3 rows)
    experiences = rollout(model_dir, n=3)
    for i, exp in enumerate(experiences):
        exp.advantage = [0.5, -1.0, 2.0][i % 3]
        exp.reward = [1.0, 0.0, 0.5][i % 3]
    return experiences


CASES = {
    # micro-batches of one row: rank 1 runs 3 padding micro-batches to stay in step with rank 0
    "grpo-token-mean-padding": dict(
        kind="grpo",
        micro=1,
        cfg=dict(kl_loss_fn_args={"kl_coef": 0.1}, entropy_loss_fn_args={"entropy_coef": 0.01}),
    ),
    # token-level advantages whitened over the whole batch, not per rank
    "reinforceplusplus-seq-mean-token-sum": dict(
        kind="reinforceplusplus", micro=4, cfg=dict(loss_agg_mode="seq-mean-token-sum")
    ),
    # one group lacks old log-probs (recomputed), the others carry shifted ones: each rank keeps
    # what it was given, though every rank must run the recompute forward
    "old-logprobs-recomputed-on-one-rank": dict(kind="grpo", micro=2, cfg={}, old="mixed"),
    # rloo with kl_penalty_fn recomputes group advantages in the trainer: whole groups per rank
    "rloo-kl-penalty-seq-mean-token-mean": dict(
        kind="rloo",
        micro=2,
        cfg=dict(loss_agg_mode="seq-mean-token-mean", kl_penalty_fn="k3"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_take_the_step_of_one_process(model_dir, local_ray, case):
    spec = CASES[case]
    experiences = _uneven_batch(model_dir)
    if spec.get("old") == "mixed":
        for exp in experiences:
            exp.logprobs = [] if exp.group_id == "g2" else [lp + 0.05 for lp in exp.logprobs]
    settings = dict(micro_batch_size=spec["micro"], grad_clip=1e9, temperature=0.8)
    opt = {"optimizer_type": "sgd", "weight_decay": 0.0}
    algo = algorithm(spec["kind"], lr=1.0, optimizer=opt, **spec["cfg"])

    single = PolicyUpdater(model_dir, algo, **settings)
    start = _weights(single)
    m1 = single.train_step(experiences)
    after1 = _weights(single)

    group = TrainerRanks(2, model_dir, algo, **settings)
    try:
        torch.testing.assert_close(_weights(group), start)  # same start
        m2 = group.train_step(experiences)
        after2 = _weights(group)
    finally:
        group.close()
    moved = float((after1["model.norm.weight"] - start["model.norm.weight"]).abs().sum())
    assert moved > 1e-3  # the step changed the weights: the comparison below means something
    for name in after1:
        torch.testing.assert_close(after2[name], after1[name], atol=3e-6, rtol=1e-4, msg=name)
    for key in (
        "actor/pg_loss",
        "actor/entropy",
        "actor/grad_norm",
        "critic/rewards/mean",
        "critic/advantages/mean",
        "response_length/mean",
        "response_length/max",
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-6), key
    if "actor/kl_loss" in m1:
        assert m2["actor/kl_loss"] == pytest.approx(m1["actor/kl_loss"], rel=1e-4, abs=1e-7)
    if "actor/kl_penalty" in m1:
        assert m2["actor/kl_penalty"] == pytest.approx(m1["actor/kl_penalty"], rel=1e-4)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_a_rank_without_a_group_runs_a_stand_in_and_the_step_is_unchanged(
    model_dir, local_ray, mode
):
    # one group (3 rows) over 2 ranks, e.g. a short last batch: rank 1 trains nothing
    experiences = _uneven_batch(model_dir)[:3]
    settings = dict(micro_batch_size=2, grad_clip=1e9, temperature=0.8)
    algo = algorithm(
        "grpo", lr=1.0, optimizer={"optimizer_type": "sgd", "weight_decay": 0.0}, loss_agg_mode=mode
    )
    single = PolicyUpdater(model_dir, algo, **settings)
    m1 = single.train_step(experiences)
    group = TrainerRanks(2, model_dir, algo, **settings)
    try:
        m2 = group.train_step(experiences)
        after2 = _weights(group)
    finally:
        group.close()
    for name, value in _weights(single).items():
        torch.testing.assert_close(after2[name], value, atol=3e-6, rtol=1e-4, msg=name)
    for key in (
        "actor/pg_loss",
        "critic/rewards/mean",
        "response_length/mean",
        "response_length/min",
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-6), key


def test_two_ranks_save_the_sharded_tree_and_resume_at_either_world_size(
    model_dir, local_ray, tmp_path
):
    experiences = _uneven_batch(model_dir)
    algo = algorithm("grpo", lr=1e-3)
    group = TrainerRanks(2, model_dir, algo, micro_batch_size=4, temperature=0.8)
    try:
        group.train_step(experiences)
        group.train_step(experiences)
        group.save(tmp_path, 2, True)
        saved = _weights(group)
        group.train_step(experiences)
        third = _weights(group)
    finally:
        group.close()
    actor = tmp_path / "global_step_2" / "actor"
    names = sorted(p.name for p in actor.glob("*.pt"))
    assert names == [
        f"{kind}_world_size_2_rank_{r}.pt"
        for kind in ("extra_state", "model", "optim")
        for r in (0, 1)
    ]
    assert json.loads((actor / "fsdp_config.json").read_text())["world_size"] == 2
    ckpt = load_checkpoint(tmp_path, 2)
    torch.testing.assert_close(ckpt.state_dict, saved)
    assert max(s["step"] for s in ckpt.optimizer_state["state"].values()) == 2  # Adam steps

    # resume on one process: its third step is the group's third step
    single = PolicyUpdater(model_dir, algo, micro_batch_size=4, temperature=0.8)
    assert single.load(tmp_path, 2) == 2
    torch.testing.assert_close(_weights(single), saved)
    single.train_step(experiences)
    for name, value in _weights(single).items():
        torch.testing.assert_close(value, third[name], atol=2e-6, rtol=1e-4, msg=name)
    single.save(tmp_path, 3, False)

    # and a checkpoint of one process resumes on two ranks
    group = TrainerRanks(2, model_dir, algo, micro_batch_size=4, temperature=0.8)
    try:
        assert group.load(tmp_path, 3) == 3
        torch.testing.assert_close(_weights(group), _weights(single))
    finally:
        group.close()


def test_shards_keep_groups_whole_and_balance_tokens():
    def exp(group: str, n: int) -> Experience:
        return Experience(prompt_ids=[1] * 4, response_ids=[2] * n, group_id=group)

    batch = [exp("a", 10), exp("a", 10), exp("b", 2), exp("b", 2), exp("c", 9), exp("c", 9)]
    shards = shard_experiences(batch, 2)
    assert [sorted({e.group_id for e in s}) for s in shards] == [["a"], ["b", "c"]]
    # fewer groups than ranks: the group stays whole, the other rank gets a masked stand-in
    shards = shard_experiences(batch[:2], 2)
    assert [e.group_id for e in shards[0]] == ["a", "a"]
    (pad,) = shards[1]
    assert pad.action_mask == [0] * 10 and pad.group_id == "__stand_in__/1"


def test_merged_metrics_add_shares_and_keep_extremes():
    merged = merge_metrics(
        [
            {"actor/pg_loss": 0.25, "actor/grad_norm": 3.0, "time/x": 1},  # a stand-in rank
            {"actor/pg_loss": 0.5, "response_length/max": 9, "actor/grad_norm": 3.0, "time/x": 2},
        ]
    )
    assert merged == {
        "actor/pg_loss": 0.75,
        "response_length/max": 9,
        "actor/grad_norm": 3.0,
        "time/x": 2,
    }


# A hang (rank 0 waiting out the process group's 30-minute timeout) fails by pytest's timeout.
@pytest.mark.timeout(300)
def test_a_failing_rank_raises_at_once_instead_of_waiting_in_a_collective(model_dir, local_ray):
    experiences = _uneven_batch(model_dir)
    group = TrainerRanks(2, model_dir, algorithm("grpo"), micro_batch_size=4, temperature=0.8)
    try:
        # rank 1 gets no experiences and fails; rank 0 waits for it in its first collective
        with pytest.raises(ray.exceptions.RayTaskError, match="at least one experience") as err:
            group._on_all("train_step", [(experiences,), ([],)])
        # the error raised is rank 1's, from its Ray actor, not a collective error of rank 0's
        assert "TrainerRank.call" in str(err.value)
        assert isinstance(err.value.cause, ValueError)
    finally:
        group.close()


def test_two_ranks_take_the_mix_chord_step_of_one_process(model_dir, local_ray):
    # group g2 is expert data (the ranks hold 2 groups and 1): each part of the mixed loss is
    # averaged over its own rows of the whole step on every rank, KL/entropy over rollouts only
    experiences = _uneven_batch(model_dir)
    for exp in experiences:
        if exp.group_id == "g2":
            exp.info["is_expert"] = True
            exp.advantage, exp.reward = 0.0, 0.0
            exp.logprobs = [0.0] * len(exp.response_ids)
    settings = dict(micro_batch_size=2, grad_clip=1e9, temperature=0.8)
    algo = algorithm(
        "mix_chord",
        lr=1.0,
        optimizer={"optimizer_type": "sgd", "weight_decay": 0.0},
        kl_loss_fn_args={"kl_coef": 0.1},
        entropy_loss_fn_args={"entropy_coef": 0.01},
        policy_loss_fn_args={"mu_peak": 0.4, "mu_valley": 0.4},
    )
    single = PolicyUpdater(model_dir, algo, **settings)
    start = _weights(single)
    m1 = single.train_step(experiences)
    after1 = _weights(single)
    group = TrainerRanks(2, model_dir, algo, **settings)
    try:
        m2 = group.train_step(experiences)
        after2 = _weights(group)
    finally:
        group.close()
    assert float((after1["model.norm.weight"] - start["model.norm.weight"]).abs().sum()) > 1e-3
    for name in after1:
        torch.testing.assert_close(after2[name], after1[name], atol=3e-6, rtol=1e-4, msg=name)
    assert m1["actor/mu"] == pytest.approx(0.4) and m2["actor/mu"] == pytest.approx(0.4)
    for key in (
        "actor/mix_loss",
        "actor/usual/pg_loss",
        "actor/expert/sft_phi_loss",
        "actor/kl_loss",
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-6), key
    # the rollouts' rewards only: (1.0 + 0.0 + 0.5) x 2 groups / 6 rows
    assert m1["critic/rewards/mean"] == pytest.approx(0.5)
