"""The trainer's log-probs of the experiences kept for the rollout explorer's token view
(``rft_core.trainer.recorded_logprobs``), on a tiny random Qwen2 on CPU:

- one process: each kept rollout's recorded log-probs are the policy's of its response tokens,
  worked by hand with plain transformers (``log_softmax(logits / T)`` at the token), and the
  rollouts not kept are not recorded;
- two FSDP2 ranks over gloo: every kept rollout (or DPO pair) is recorded exactly once, in the
  batch's own experience whichever rank trained it, with the one-process values; a second step on
  one group alone (the other rank runs a stand-in copy of a kept rollout) records only the group;
- DPO: a kept pair's chosen and rejected per-token log-probs, their sums under the policy and the
  reference, and the pair's implicit rewards, margin and loss, worked by hand at step 1 (policy =
  reference) and step 2 (after an update).

Tolerances: the trainer runs rows in padded micro-batches, the hand computation each row alone,
and two ranks split the batch differently; float32 kernels of another CPU path
(``ATEN_CPU_CAPABILITY=default|avx2|avx512``) move a log-prob by ~1e-6 (measured: see the report
of the change), so raw values compare at 2e-5 and entries rounded to 4 decimals at 2e-4.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from policy_rollouts import algorithm, rollout
from tiny_lm import build_tiny_model
from transformers import AutoModelForCausalLM

from rft_core.config import load_config_from_dict
from rft_core.experience import Experience
from rft_core.explorer.rollout_samples import (
    PAIR_INFO_KEY,
    SAMPLE_INFO_KEY,
    TRAINER_LOGPROBS_KEY,
    mark_pairs,
    pair_samples,
    trainer_samples,
)
from rft_core.messages import experiences_from_messages
from rft_core.trainer.policy import PolicyUpdater
from rft_core.trainer.ranks import TrainerRanks
from rft_core.trainer.trainer import Trainer

TEMPERATURE = 0.8  # the trainer scores at the sampling temperature
RAW = 2e-5  # recorded floats against each other or the hand computation
ROUNDED = 2e-4  # entries rounded to 4 decimals (±5e-5) against the same
SGD = {"optimizer_type": "sgd", "weight_decay": 0.0}
PAIRS = [
    {"prompt": f"{a}+{b}=?", "chosen": str(a + b), "rejected": f"{a + b + 1} or so"}
    for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (7, 7)]
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def by_hand(model, prompt: list[int], response: list[int], temperature: float = 1.0) -> list[float]:
    """Each response token's log-prob from one plain forward of prompt + response."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + response])).logits[0].float()
    # the token at position t is predicted by the logits at t - 1
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1).tolist()


def kept_rollouts(model_dir: str, kept: int) -> list[Experience]:
    """3 task groups of 3 rollouts (explorer step 1); the first ``kept`` marked as the
    explorer marks the rollouts it keeps."""
    experiences = rollout(model_dir, n=3)
    for i, exp in enumerate(experiences):
        exp.explorer_step = 1
        exp.advantage = [0.5, -1.0, 2.0][i % 3]
        if i < kept:
            exp.info[SAMPLE_INFO_KEY] = i
    return experiences


def recorded(experiences: list[Experience]) -> dict[int, list[float]]:
    return {
        e.info[SAMPLE_INFO_KEY]: e.info[TRAINER_LOGPROBS_KEY]
        for e in experiences
        if TRAINER_LOGPROBS_KEY in e.info
    }


def test_kept_rollouts_record_the_policys_logprob_of_each_response_token(model_dir):
    experiences = kept_rollouts(model_dir, kept=5)  # two whole groups and one of the third
    trainer = PolicyUpdater(model_dir, algorithm("grpo"), micro_batch_size=2, temperature=0.8)
    trainer.train_step(experiences)
    values = recorded(experiences)
    assert sorted(values) == [0, 1, 2, 3, 4]  # the 4 rollouts not kept are not recorded
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for exp in experiences[:5]:
        hand = by_hand(model, exp.prompt_ids, exp.response_ids, TEMPERATURE)
        assert len(hand) == len(exp.response_ids) > 0
        assert values[exp.info[SAMPLE_INFO_KEY]] == pytest.approx(hand, abs=RAW)
    entries = trainer_samples(experiences, trainer_step=1)
    assert [e["sample_index"] for e in entries] == [0, 1, 2, 3, 4]
    for entry in entries:
        assert entry["explorer_step"] == 1 and entry["trainer_step"] == 1
        assert entry["trainer_logprobs"] == pytest.approx(values[entry["sample_index"]], abs=6e-5)


def _steps(policy, batches: list[list[Experience]]) -> list[list[dict]]:
    """Each batch's trainer entries after its step (the batches are trained in order)."""
    out = []
    for step, batch in enumerate(batches, start=1):
        policy.train_step(batch)
        out.append(trainer_samples(batch, trainer_step=step))
    return out


def test_two_ranks_record_every_kept_rollout_once_with_the_one_process_values(model_dir, local_ray):
    # micro-batches of one row: the rank with one group runs padding micro-batches; step 2 is
    # the first group alone, so the other rank trains a stand-in copy of a kept rollout
    settings = dict(micro_batch_size=1, grad_clip=1e9, temperature=TEMPERATURE)
    algo = algorithm("grpo", lr=1.0, optimizer=SGD)

    def batches() -> list[list[Experience]]:
        full = kept_rollouts(model_dir, kept=9)
        first = [copy.deepcopy(e) for e in full[:3]]
        for e in first:
            e.info[SAMPLE_INFO_KEY] += 100  # another explorer step's indices
        return [full, first]

    single = _steps(PolicyUpdater(model_dir, algo, **settings), batches())
    group = TrainerRanks(2, model_dir, algo, **settings)
    try:
        sharded = _steps(group, batches())
    finally:
        group.close()
    for step, indices in ((0, list(range(9))), (1, [100, 101, 102])):
        # each kept rollout exactly once, whichever rank trained it
        assert sorted(e["sample_index"] for e in sharded[step]) == indices
        expected = {e["sample_index"]: e["trainer_logprobs"] for e in single[step]}
        for entry in sharded[step]:
            assert entry["trainer_logprobs"] == pytest.approx(
                expected[entry["sample_index"]], abs=ROUNDED
            ), (step, entry["sample_index"])
    # step 2 ran on the weights step 1 moved: the values differ from step 1's
    moved = [
        abs(a - b)
        for e in sharded[1]
        for a, b in zip(
            e["trainer_logprobs"],
            sharded[0][e["sample_index"] - 100]["trainer_logprobs"],
            strict=True,
        )
    ]
    assert max(moved) > 1e-2


def dpo_pairs(tokenizer) -> list[Experience]:
    return experiences_from_messages(PAIRS, tokenizer, max_len=64)


def _sums(model, exp: Experience) -> tuple[float, float]:
    return (
        sum(by_hand(model, exp.prompt_ids, exp.response_ids)),
        sum(by_hand(model, exp.prompt_ids, exp.rejected_ids)),
    )


def test_dpo_records_the_kept_pairs_logprobs_rewards_and_margin(model_dir):
    beta = 0.1
    trainer = PolicyUpdater(model_dir, algorithm("dpo", lr=5e-2), micro_batch_size=4)
    dataset = dpo_pairs(trainer.tokenizer)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for step in (1, 2):
        policy = copy.deepcopy(trainer.model).eval()  # the weights the step's forward runs
        batch = mark_pairs(dataset, limit=3)  # 3 rows: 2 whole pairs
        trainer.train_step(batch)
        entries = pair_samples(batch, step, tokenizer=trainer.tokenizer)
        # the dataset's experiences stay unmarked for the next epoch
        assert not any(SAMPLE_INFO_KEY in e.info or PAIR_INFO_KEY in e.info for e in dataset)
        assert [(e["group"], e["side"], e["sample_index"]) for e in entries] == [
            (0, "chosen", 0),
            (0, "rejected", 1),
            (1, "chosen", 2),
            (1, "rejected", 3),
        ]
        for pair, exp in enumerate(dataset[:2]):
            chosen, rejected = entries[2 * pair], entries[2 * pair + 1]
            assert (
                chosen["prompt"] == rejected["prompt"] == trainer.tokenizer.decode(exp.prompt_ids)
            )
            assert chosen["response"] == trainer.tokenizer.decode(exp.response_ids)
            assert chosen["response"].startswith(PAIRS[pair]["chosen"])
            assert rejected["response"].startswith(PAIRS[pair]["rejected"])
            for entry, ids in ((chosen, exp.response_ids), (rejected, exp.rejected_ids)):
                hand = by_hand(policy, exp.prompt_ids, ids)
                assert len(entry["tokens"]) == len(entry["trainer_logprobs"]) == len(ids)
                assert "logprobs" not in entry  # no rollout engine sampled it
                assert entry["trainer_logprobs"] == pytest.approx(hand, abs=ROUNDED)
                assert entry["logprob_sum"] == pytest.approx(sum(hand), abs=RAW * len(ids))
                assert entry["model_version"] == step - 1 and entry["trainer_step"] == step
            c, r = _sums(policy, exp)
            c_ref, r_ref = _sums(reference, exp)
            assert chosen["reference_logprob_sum"] == pytest.approx(c_ref, abs=1e-4)
            assert rejected["reference_logprob_sum"] == pytest.approx(r_ref, abs=1e-4)
            # implicit rewards β·(log π − log π_ref), margin z = their difference, loss −log σ(z)
            reward_c, reward_r = beta * (c - c_ref), beta * (r - r_ref)
            margin = reward_c - reward_r
            assert chosen["reward"] == pytest.approx(reward_c, abs=1e-5)
            assert rejected["reward"] == pytest.approx(reward_r, abs=1e-5)
            terms = chosen["reward_parts"]
            assert terms == rejected["reward_parts"]
            assert terms["dpo_margin"] == pytest.approx(margin, abs=1e-5)
            assert terms["dpo_loss"] == pytest.approx(math.log1p(math.exp(-margin)), abs=1e-5)
            assert terms["dpo_accuracy"] == float(margin > 0)
            if step == 1:  # policy = reference: every implicit reward is 0, the loss log 2
                assert margin == 0.0 and terms["dpo_loss"] == pytest.approx(math.log(2))
            else:
                assert abs(margin) > 1e-3  # the update moved the policy off the reference


def test_two_ranks_record_every_dpo_pair_once_with_the_one_process_values(model_dir, local_ray):
    settings = dict(micro_batch_size=2, grad_clip=1e9)
    algo = algorithm("dpo", lr=5e-2, optimizer=SGD)
    single = PolicyUpdater(model_dir, algo, **settings)
    batch = mark_pairs(dpo_pairs(single.tokenizer), limit=10)  # every pair
    single.train_step(batch)
    expected = {e["sample_index"]: e for e in pair_samples(batch, 1, tokenizer=single.tokenizer)}
    group = TrainerRanks(2, model_dir, algo, **settings)
    try:
        batch = mark_pairs(dpo_pairs(group.tokenizer), limit=10)
        group.train_step(batch)
    finally:
        group.close()
    entries = pair_samples(batch, 1, tokenizer=group.tokenizer)
    assert sorted(e["sample_index"] for e in entries) == list(range(2 * len(PAIRS)))
    for entry in entries:
        want = expected[entry["sample_index"]]
        assert (entry["group"], entry["side"]) == (want["group"], want["side"])
        assert entry["trainer_logprobs"] == pytest.approx(want["trainer_logprobs"], abs=ROUNDED)
        for key in ("logprob_sum", "reference_logprob_sum"):
            assert entry[key] == pytest.approx(want[key], abs=1e-4), key


def test_a_dpo_run_sends_the_pairs_it_keeps_as_rollout_samples(model_dir, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(row) + "\n" for row in PAIRS))
    cfg = load_config_from_dict(
        {
            "project": "p",
            "name": "dpo",
            "mode": "train",
            "checkpoint_root_dir": str(tmp_path),
            "algorithm": {"algorithm_type": "dpo"},
            "model": {"model_path": model_dir, "max_model_len": 64},
            "cluster": {"node_num": 1, "gpu_per_node": 0},
            "buffer": {
                "total_steps": 3,
                "train_batch_size": 2,
                "trainer_input": {
                    "experience_buffer": {
                        "name": "pairs",
                        "storage_type": "file",
                        "path": str(pairs),
                        "format": {
                            "prompt_type": "plaintext",
                            "prompt_key": "prompt",
                            "chosen_key": "chosen",
                            "rejected_key": "rejected",
                        },
                    }
                },
            },
            "trainer": {"save_interval": 0, "save_hf_checkpoint": "never"},
            # trainer steps 1 and 3, the first pair of each (one pair: two rows)
            "monitor": {
                "monitor_type": "tensorboard",
                "rollout_samples_per_step": 2,
                "rollout_samples_interval": 2,
            },
        }
    )
    trainer = Trainer(cfg)
    try:
        assert trainer.run()["steps"] == 3
    finally:
        trainer.close()
    lines = (Path(cfg.job_dir) / "monitor" / "trainer_samples.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.strip()]
    # steps 1 and 3 read pairs 0, 1 and 4, 0 (the dataset wraps): their first pair is kept
    assert [(e["step"], e["side"], e["group"], e["sample_index"]) for e in entries] == [
        (1, "chosen", 0, 0),
        (1, "rejected", 0, 1),
        (3, "chosen", 0, 0),
        (3, "rejected", 0, 1),
    ]
    # the prompt as the policy reads it (its chat template), the responses after it
    assert "user\n1+2=?" in entries[0]["prompt"] and "user\n7+7=?" in entries[2]["prompt"]
    assert entries[1]["response"].startswith("4 or so")
    for entry in entries:
        assert len(entry["tokens"]) == len(entry["trainer_logprobs"]) == entry["response_length"]
        assert entry["logprob_sum"] == pytest.approx(sum(entry["trainer_logprobs"]), abs=1e-3)
    assert entries[0]["reward_parts"]["dpo_loss"] == pytest.approx(math.log(2))  # step 1
