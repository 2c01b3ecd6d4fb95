"""``trainer.trainer_config`` (the verl-style dict Trinity-RFT users pass): the keys that map onto
our settings arrive in the resolved config with Trinity's precedence, every other key is warned
about with its full YAML path, and ``ppo_epochs`` makes that many optimizer steps a batch."""

from __future__ import annotations

import logging

import pytest
from policy_rollouts import algorithm, rollout
from tiny_lm import build_tiny_model

from rft_core.config import load_config_from_dict
from rft_core.trainer.policy import PolicyUpdater

ACTOR = "trainer.trainer_config.actor_rollout_ref.actor"


def _config(trainer_config: dict, **sections) -> dict:
    raw = {
        "mode": "both",
        "model": {"model_path": "m", "max_model_len": 2048},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "buffer": {"batch_size": 2, "explorer_input": {"taskset": {"path": "tasks.jsonl"}}},
        "trainer": {"trainer_config": trainer_config},
    }
    for section, values in sections.items():
        raw[section] = {**raw[section], **values}
    return raw


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_mapped_keys_arrive_in_the_resolved_config():
    cfg = load_config_from_dict(
        _config(
            {
                "actor_rollout_ref": {
                    "model": {"enable_gradient_checkpointing": True, "use_remove_padding": True},
                    "actor": {
                        "use_dynamic_bsz": False,
                        "ppo_micro_batch_size_per_gpu": 4,
                        "ppo_max_token_len_per_gpu": 8192,
                        "ppo_epochs": 2,
                        "grad_clip": 0.5,
                        "use_torch_compile": False,
                        "optim": {
                            "lr": 2e-5,
                            "weight_decay": 0.1,
                            "betas": [0.9, 0.95],
                            "lr_warmup_steps": 3,
                            "warmup_style": "cosine",
                            "min_lr_ratio": 0.1,
                        },
                    },
                }
            }
        )
    )
    t, o = cfg.trainer, cfg.algorithm.optimizer
    assert (t.micro_batch_size_per_gpu, t.max_token_len_per_gpu, t.ppo_epochs) == (4, 8192, 2)
    assert (t.grad_clip, o.clip_grad) == (0.5, 0.5)
    assert t.gradient_checkpointing is True and t.use_remove_padding is True
    assert t.use_torch_compile is False
    assert (o.lr, o.weight_decay, o.betas, o.lr_warmup_steps) == (2e-5, 0.1, [0.9, 0.95], 3)
    assert (o.lr_scheduler_type, o.min_lr_ratio) == ("cosine", 0.1)


def test_both_set_follows_trinitys_precedence_and_says_so(caplog):
    # Trinity: algorithm.optimizer overwrites actor.optim; actor.grad_clip beats trainer.grad_clip
    raw = _config(
        {"actor_rollout_ref": {"actor": {"grad_clip": 0.5, "optim": {"lr": 1e-5}}}},
        algorithm={"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 3e-6}},
        trainer={"grad_clip": 2.0},
    )
    raw["trainer"]["trainer_config"] = {
        "actor_rollout_ref": {"actor": {"grad_clip": 0.5, "optim": {"lr": 1e-5}}}
    }
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config_from_dict(raw)
    assert cfg.algorithm.optimizer.lr == 3e-6 and cfg.trainer.grad_clip == 0.5
    warned = " | ".join(_messages(caplog))
    assert f"{ACTOR}.optim.lr = 1e-05 and algorithm.optimizer.lr = 3e-06 are both set: " in warned
    assert "algorithm.optimizer.lr is used" in warned
    assert f"{ACTOR}.grad_clip = 0.5 and trainer.grad_clip = 2.0 are both set: {ACTOR}.grad_clip is used" in warned  # fmt: skip


def test_dynamic_batch_size_forms_micro_batches_by_tokens_and_names_the_ignored_count(caplog):
    raw = _config(
        {
            "actor_rollout_ref": {
                "actor": {"use_dynamic_bsz": True, "ppo_micro_batch_size_per_gpu": 8}
            }
        },  # fmt: skip
        trainer={"micro_batch_size_per_gpu": 16},
    )
    raw["trainer"]["trainer_config"] = {
        "actor_rollout_ref": {"actor": {"use_dynamic_bsz": True, "ppo_micro_batch_size_per_gpu": 8}}
    }
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        cfg = load_config_from_dict(raw)
    assert cfg.trainer.micro_batch_size_per_gpu is None
    warned = " | ".join(_messages(caplog))
    assert f"{ACTOR}.ppo_micro_batch_size_per_gpu = 8 has no effect" in warned
    # without use_dynamic_bsz there, trainer.use_dynamic_bsz decides (Trinity's default: true)
    raw["trainer"]["trainer_config"] = {
        "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 8}}
    }
    raw["trainer"]["use_dynamic_bsz"] = False
    assert load_config_from_dict(raw).trainer.micro_batch_size_per_gpu == 8


def test_keys_without_a_setting_here_are_warned_with_their_full_path(caplog):
    raw = _config(
        {
            "actor_rollout_ref": {
                "actor": {"ppo_mini_batch_size": 64, "fsdp_config": {"param_offload": True}},
                "ref": {"log_prob_micro_batch_size_per_gpu": 2},
            },
            "critic": {"optim": {"lr": 1e-5}},
            "trainer": {"balance_batch": False},
        }
    )
    with caplog.at_level(logging.WARNING, logger="rft_core.config"):
        load_config_from_dict(raw)
    named = {m.split(" = ")[0] for m in _messages(caplog) if "does not implement" in m}
    assert named == {
        f"{ACTOR}.ppo_mini_batch_size",
        f"{ACTOR}.fsdp_config.param_offload",
        "trainer.trainer_config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "trainer.trainer_config.critic.optim.lr",
        "trainer.trainer_config.trainer.balance_batch",
    }
    assert f"{ACTOR}.ppo_mini_batch_size: RFT Studio uses buffer.train_batch_size" in " ".join(
        _messages(caplog)
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_ppo_epochs_take_that_many_optimizer_steps_and_one_lr_step(model_dir):
    trainer = PolicyUpdater(
        model_dir, algorithm("grpo", lr=1e-3), device="cpu", dtype="float32", ppo_epochs=3
    )
    experiences = rollout(model_dir, n=2, max_tokens=6)
    steps = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (steps.append(1), step(*a, **k))[1]
    metrics = trainer.train_step(experiences)
    assert len(steps) == 3 and trainer.global_step == 1
    # epochs 2 and 3 see a policy that moved from the sampling one: log-ratio no longer 0
    assert metrics["actor/ppo_kl"] != pytest.approx(0.0, abs=1e-7)
