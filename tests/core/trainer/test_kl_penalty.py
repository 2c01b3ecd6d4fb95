"""``algorithm.kl_penalty_fn`` (KL as a reward penalty) as Trinity-RFT applies it: before the
advantages it computes in the trainer (ppo, reinforceplusplus, rloo), ignored where the explorer
computes them (grpo) - which we say in a warning; and where each algorithm's advantages are
computed (grpo and rloo: the explorer's are trained on as they arrive). Real tiny model and
real files; nothing mocked.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from policy_rollouts import algorithm, rollout
from tiny_lm import build_tiny_model

from rft_core.actor_setup import setup_actor_logging
from rft_core.actors.actor_log import release_output
from rft_core.algorithms.advantages import rloo_advantages
from rft_core.algorithms.kl import kl_penalized_rewards
from rft_core.algorithms.settings import AlgorithmSettings
from rft_core.config import load_config
from rft_core.config.presets import ALGORITHM_TYPES, get_preset, ignored_kl_penalty
from rft_core.trainer.policy import PolicyUpdater

SEED = Path(__file__).parents[3] / "examples" / "grpo_gsm8k" / "gsm8k.yaml"

# two responses, three token slots; the second response's last slot is padding
LP = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
REF = torch.tensor([[-1.5, -1.0, -0.5], [-1.2, -1.4, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_penalized_rewards_by_hand():
    # d = lp - ref: row 0 [0.5, -1.0, 0.0], row 1 [0.2, 0.4] (the padded slot is not counted)
    # k1 = d: sums -0.5 and 0.6; coef 0.1: [1 + 0.05, 0 - 0.06] = [1.05, -0.06]
    rewards = torch.tensor([1.0, 0.0])
    out, metrics = kl_penalized_rewards(rewards, LP, REF, MASK, "k1", 0.1)
    assert out.tolist() == pytest.approx([1.05, -0.06])
    # mean KL per unmasked token: (0.5 - 1.0 + 0.0 + 0.2 + 0.4) / 5 = 0.02
    assert metrics == {"kl_penalty": pytest.approx(0.02), "kl_coef": 0.1}
    # k2 = d²/2: row 0 [0.125, 0.5, 0] sum 0.625; row 1 [0.02, 0.08] sum 0.1
    out, _ = kl_penalized_rewards(rewards, LP, REF, MASK, "k2", 0.1)
    assert out.tolist() == pytest.approx([1.0 - 0.0625, -0.01])


def test_rloo_of_penalized_rewards_by_hand():
    # one group of three: rewards [1, 0, 1], summed k1 KL [2, 0, 1], coef 0.1 -> [0.8, 0.0, 0.9]
    lp = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    ref = torch.zeros(3, 2)
    penalized, _ = kl_penalized_rewards(
        torch.tensor([1.0, 0.0, 1.0]), lp, ref, torch.ones(3, 2), "k1", 0.1
    )
    assert penalized.tolist() == pytest.approx([0.8, 0.0, 0.9])
    # A_i = r_i - mean of the others: 0.8 - 0.45 = 0.35; 0 - 0.85; 0.9 - 0.4 = 0.5
    advantages = rloo_advantages(penalized, ["g", "g", "g"])
    assert advantages.tolist() == pytest.approx([0.35, -0.85, 0.5])
    # without the penalty: [0.5, -1.0, 0.5]
    assert rloo_advantages(torch.tensor([1.0, 0.0, 1.0]), ["g"] * 3).tolist() == [0.5, -1.0, 0.5]


def test_which_algorithm_types_apply_it():
    applies = {name for name in ALGORITHM_TYPES if get_preset(name).applies_kl_penalty}
    # Trinity: advantages in the trainer (grpo_verl: its group advantages too)
    assert applies == {"ppo", "reinforceplusplus", "rloo", "grpo_verl"}
    message = ignored_kl_penalty("GRPO", "k1")
    assert message.startswith("algorithm.kl_penalty_fn: 'k1' is ignored for algorithm_type grpo")
    assert "algorithm.kl_loss_fn" in message and "kl_penalty_fn: none" in message
    assert "without rewards" in ignored_kl_penalty("sft", "k2")
    assert ignored_kl_penalty("grpo", "none") is None and ignored_kl_penalty("grpo", None) is None
    assert ignored_kl_penalty("rloo", "k1") is None


def test_grpo_config_warns_at_load_and_in_the_trainer_log(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="rft_core"):
        cfg = load_config(SEED, ["algorithm.kl_penalty_fn=k1"])
    assert "algorithm.kl_penalty_fn: 'k1' is ignored for algorithm_type grpo" in caplog.text
    logger = logging.getLogger("rft_core")
    before = list(logger.handlers)
    monitor = setup_actor_logging(cfg, "trainer")
    try:
        settings = AlgorithmSettings.from_config(cfg.algorithm)
    finally:
        for handler in [h for h in logger.handlers if h not in before]:
            logger.removeHandler(handler)
            handler.close()
        release_output("trainer")
        monitor.close()
    run_log = (Path(cfg.job_dir) / "log" / "trainer.log").read_text()
    assert "WARNING" in run_log and "use algorithm.kl_loss_fn" in run_log
    assert not settings.uses_kl_penalty and settings.uses_kl_loss


def shorten_and_shift(experiences, delta: float) -> list[int]:
    """Responses of different lengths (prefixes of the sampled ones) whose rollout log-probs sit
    ``delta`` above the reference model's, so each token's k1 KL is ``delta``."""
    lengths = []
    for i, exp in enumerate(experiences):
        n = min(len(exp.response_ids), 3 + i % 5)
        exp.response_ids, exp.logprobs = (
            exp.response_ids[:n],
            [lp + delta for lp in exp.logprobs[:n]],
        )
        exp.truncated = True
        lengths.append(n)
    return lengths


def test_rloo_trainer_recomputes_advantages_from_penalized_rewards(model_dir):
    experiences = rollout(model_dir, n=4)  # 3 groups of 4, rewards 0/1
    lengths = shorten_and_shift(experiences, delta=0.5)
    for exp in experiences:
        exp.advantage = 100.0  # the explorer's, from raw rewards: must not be used
    cfg = algorithm("rloo", kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.5})
    trainer = PolicyUpdater(model_dir, cfg, temperature=0.8, micro_batch_size=5)
    metrics = trainer.train_step(experiences)
    # reference == the rollout policy (up to 1e-4 per token), so KL = delta on every token
    assert metrics["actor/kl_penalty"] == pytest.approx(0.5, abs=1e-3)
    penalized = torch.tensor(
        [e.reward - 0.5 * 0.5 * n for e, n in zip(experiences, lengths, strict=True)]
    )
    expected = rloo_advantages(penalized, [e.group_id for e in experiences]).tolist()
    token_mean = sum(a * n for a, n in zip(expected, lengths, strict=True)) / sum(lengths)
    assert metrics["critic/advantages/mean"] == pytest.approx(token_mean, abs=2e-3)
    raw = rloo_advantages(
        torch.tensor([e.reward for e in experiences]), [e.group_id for e in experiences]
    )
    raw_mean = sum(a * n for a, n in zip(raw.tolist(), lengths, strict=True)) / sum(lengths)
    assert abs(token_mean - raw_mean) > 0.05  # the penalty changes the advantages


@pytest.mark.parametrize(
    ("kind", "penalty", "in_explorer"),
    [
        ("grpo", None, True),
        ("grpo", "k1", True),  # grpo ignores kl_penalty_fn
        ("rloo", None, True),
        ("rloo", "k1", False),  # over KL-penalized rewards: needs the reference, so the trainer
        ("reinforceplusplus", None, False),  # token-level
        ("ppo", None, False),
        ("sft", None, False),
    ],
)
def test_where_the_advantages_are_computed(kind, penalty, in_explorer):
    args = {"kl_penalty_fn": penalty, "kl_penalty_fn_args": {"kl_coef": 0.5}} if penalty else {}
    settings = AlgorithmSettings.resolve(algorithm(kind, **args))
    assert settings.advantages_in_explorer is in_explorer


def test_rloo_trainer_keeps_the_explorer_advantages(model_dir):
    """RLOO without a KL penalty: the explorer's leave-one-out advantages are trained on as
    they arrive, not recomputed (nor thrown away) in the trainer."""
    experiences = rollout(model_dir, n=4)
    lengths = shorten_and_shift(experiences, delta=0.0)
    for i, exp in enumerate(experiences):
        exp.advantage = 0.25 * (i % 3) - 0.3  # not what rloo of the rewards gives
    trainer = PolicyUpdater(model_dir, algorithm("rloo"), temperature=0.8, micro_batch_size=5)
    metrics = trainer.train_step(experiences)
    given = sum(e.advantage * n for e, n in zip(experiences, lengths, strict=True)) / sum(lengths)
    assert metrics["critic/advantages/mean"] == pytest.approx(given, abs=1e-6)


def test_grpo_trainer_keeps_the_explorer_advantages(model_dir, caplog):
    experiences = rollout(model_dir, n=4)
    lengths = shorten_and_shift(experiences, delta=0.5)
    cfg = algorithm("grpo", kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.5})
    with caplog.at_level(logging.WARNING, logger="rft_core"):
        trainer = PolicyUpdater(model_dir, cfg, temperature=0.8, micro_batch_size=5)
    assert "is ignored for algorithm_type grpo" in caplog.text
    metrics = trainer.train_step(experiences)
    assert "actor/kl_penalty" not in metrics
    explorer = sum(e.advantage * n for e, n in zip(experiences, lengths, strict=True)) / sum(
        lengths
    )
    assert metrics["critic/advantages/mean"] == pytest.approx(explorer, abs=1e-6)
