"""What ``algorithm.algorithm_type`` means: the advantage fn, policy loss, KL and entropy terms,
and which models and data an algorithm needs. The config layer fills every ``algorithm.*`` field
the user left unset from the preset; the runtime reads ``use_*`` to decide which actors to start.

Defaults follow Trinity-RFT 0.6, except one deliberate fix: group algorithms default to a real
group (GRPO 8, RLOO 4) instead of Trinity's silent groups of 1/2, and ``group_algorithm`` lets the
validator reject ``repeat_times < 2`` for them. DPO uses no separate KL loss (its ``beta``
already ties the policy to the reference).

``kl_penalty_fn`` (KL subtracted from the rewards) follows Trinity-RFT: it applies where Trinity
computes advantages in the trainer, after the reference log-probs (``ppo``, ``reinforceplusplus``,
``rloo``: ``compute_advantage_in_trainer`` in Trinity's ``trinity/algorithm/algorithm.py``), and is
ignored elsewhere (``grpo``: advantages come from the explorer's raw rewards; ``sft``, ``dpo``: no
rewards). Trinity ignores it there silently; we say so (:func:`ignored_kl_penalty`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from rft_core.errors import ConfigError
from rft_core.registry import closest_name


@dataclass
class AlgorithmPreset:
    algorithm_type: str
    policy_loss_fn: str  # registry name in algorithms.policy_losses
    advantage_fn: str | None = None  # registry name in algorithms.advantages; None: no advantages
    advantage_fn_args: dict[str, Any] = field(default_factory=dict)
    policy_loss_fn_args: dict[str, Any] = field(default_factory=dict)
    kl_loss_fn: str = "none"  # KL(policy, reference) added to the loss
    kl_coef: float = 0.0
    kl_penalty_fn: str = "none"  # KL subtracted from token rewards
    kl_penalty_coef: float = 0.0
    applies_kl_penalty: bool = False  # the trainer applies kl_penalty_fn before advantages
    entropy_coef: float = 0.0
    loss_agg_mode: str = "token-mean"
    use_reference: bool = False
    use_critic: bool = False
    use_rollout: bool = True  # False: trains from a dataset (sft, dpo)
    group_algorithm: bool = False  # advantages need repeat_times > 1 responses per task
    repeat_times: int = 1
    compute_advantage_in_trainer: bool = False  # token-level fns (ppo, reinforce++) run there
    schema: str = "experience"  # training data: "experience" | "sft" | "dpo"


_PPO_CLIP_ARGS = {"clip_range": 0.2, "clip_ratio_c": 3.0}

PRESETS: dict[str, AlgorithmPreset] = {
    "grpo": AlgorithmPreset(
        algorithm_type="grpo",
        policy_loss_fn="ppo",
        advantage_fn="grpo",
        advantage_fn_args={"epsilon": 1e-6},
        policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    ),
    "rloo": AlgorithmPreset(
        algorithm_type="rloo",
        policy_loss_fn="ppo",
        advantage_fn="rloo",
        policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
        kl_loss_fn="k2",
        kl_coef=0.001,
        applies_kl_penalty=True,
        use_reference=True,
        group_algorithm=True,
        repeat_times=4,
    ),
    "reinforceplusplus": AlgorithmPreset(
        algorithm_type="reinforceplusplus",
        policy_loss_fn="ppo",
        advantage_fn="reinforceplusplus",
        advantage_fn_args={"gamma": 1.0},
        policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
        kl_loss_fn="k2",
        kl_coef=0.001,
        applies_kl_penalty=True,
        use_reference=True,
        repeat_times=2,
        compute_advantage_in_trainer=True,
    ),
    "ppo": AlgorithmPreset(
        algorithm_type="ppo",
        policy_loss_fn="ppo",
        advantage_fn="ppo",
        advantage_fn_args={"gamma": 1.0, "lam": 1.0},
        policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
        kl_loss_fn="k2",
        kl_coef=0.001,
        applies_kl_penalty=True,
        use_reference=True,
        use_critic=True,
        repeat_times=1,
        compute_advantage_in_trainer=True,
    ),
    # Trinity-RFT's off-policy / REINFORCE family (trinity/algorithm/algorithm.py): group
    # advantages in the explorer, a loss of its own; a real group by default, as for grpo
    "opmd": AlgorithmPreset(
        algorithm_type="opmd",
        policy_loss_fn="opmd",
        advantage_fn="opmd",
        advantage_fn_args={"opmd_baseline": "mean", "tau": 1.0},
        policy_loss_fn_args={"tau": 1.0},
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    ),
    "gspo": AlgorithmPreset(
        algorithm_type="gspo",
        policy_loss_fn="gspo",
        advantage_fn="grpo",
        advantage_fn_args={"epsilon": 1e-6},
        policy_loss_fn_args={"clip_range_low": 3e-4, "clip_range_high": 4e-4},
        kl_loss_fn="k2",
        kl_coef=0.001,
        loss_agg_mode="seq-mean-token-mean",  # GSPO's loss is a mean over sequences
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    ),
    "cispo": AlgorithmPreset(
        algorithm_type="cispo",
        policy_loss_fn="cispo",
        advantage_fn="grpo",
        advantage_fn_args={"epsilon": 1e-6},
        policy_loss_fn_args={"clip_range_low": 1.0, "clip_range_high": 0.28},
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    ),
    "topr": AlgorithmPreset(
        algorithm_type="topr",
        policy_loss_fn="topr",
        advantage_fn="reinforce",  # the raw reward, as in the paper (grpo works too)
        policy_loss_fn_args={"advantage_threshold": 0.0},
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        repeat_times=2,
    ),
    "sppo": AlgorithmPreset(
        algorithm_type="sppo",
        policy_loss_fn="sppo",
        advantage_fn="opmd",
        advantage_fn_args={"opmd_baseline": "mean", "tau": 1.0},
        policy_loss_fn_args={"epsilon": 0.3},
        group_algorithm=True,
        repeat_times=8,
    ),
    "asymre": AlgorithmPreset(
        algorithm_type="asymre",
        policy_loss_fn="opmd",
        advantage_fn="asymre",
        advantage_fn_args={"baseline_shift": -0.1},
        policy_loss_fn_args={"tau": 1.0},
        group_algorithm=True,
        repeat_times=8,
    ),
    "rec": AlgorithmPreset(
        algorithm_type="rec",
        policy_loss_fn="rec",
        advantage_fn="rec",
        advantage_fn_args={"epsilon": 1e-6, "std_normalize": False, "drop": None},
        policy_loss_fn_args={
            "epsilon_low": 0.2,
            "epsilon_high": 0.2,
            "epsilon_low_prime": 0.6,
            "epsilon_high_prime": 2.0,
            "clip_mode": "none",
            "weight": "none",
            "regularizer": "none",
            "regularizer_coef": 0.0,
            "temp": 1.0,
        },
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    ),
    "sft": AlgorithmPreset(
        algorithm_type="sft",
        policy_loss_fn="sft",
        use_rollout=False,
        schema="sft",
    ),
    "dpo": AlgorithmPreset(
        algorithm_type="dpo",
        policy_loss_fn="dpo",
        policy_loss_fn_args={"beta": 0.1, "label_smoothing": 0.0},
        use_reference=True,
        use_rollout=False,
        schema="dpo",
    ),
}

# ---- mix, mix_chord: GRPO on the rollouts plus SFT on expert data (Trinity-RFT's MIX and CHORD,
# ``trinity/algorithm/algorithm.py``). Each trainer step reads ``ceil(expert_data_ratio x
# train_batch_size)`` expert rows from ``buffer.trainer_input.auxiliary_buffers.<sft_dataset_name>``
# and the rest from the experience buffer (Trinity's ``mix`` sample strategy, its defaults below).
MIX_SAMPLE_STRATEGY_ARGS: dict[str, Any] = {
    "expert_data_ratio": 0.5,
    "sft_dataset_name": "sft_dataset",
}

for _name, _loss_args in (
    ("mix", {"mu": 0.1, "clip_range": 0.2}),
    (
        "mix_chord",
        {
            "mu_warmup_steps": 0,
            "mu_decay_steps": 0,
            "mu_peak": 0.1,
            "mu_valley": 0.1,
            "clip_range": 0.2,
            "enable_phi_function": True,
        },
    ),
):
    PRESETS[_name] = AlgorithmPreset(
        algorithm_type=_name,
        policy_loss_fn=_name,
        advantage_fn="grpo",
        advantage_fn_args={"epsilon": 1e-6},
        policy_loss_fn_args=_loss_args,
        kl_loss_fn="k2",
        kl_coef=0.001,
        use_reference=True,
        group_algorithm=True,
        repeat_times=8,
    )


# ---- round 2 (trinity/algorithm/algorithm.py of agentscope-ai/Trinity-RFT): SAPO, M2PO, RAFT,
# step-wise GRPO, GiGPO, grpo_verl (Clip_B's); group algorithms get a real group, as above
PRESETS["sapo"] = AlgorithmPreset(
    algorithm_type="sapo",
    policy_loss_fn="sapo",
    advantage_fn="grpo",
    advantage_fn_args={"epsilon": 1e-6},
    policy_loss_fn_args={"tau_pos": 1.0, "tau_neg": 1.05},
    kl_loss_fn="k2",
    kl_coef=0.001,
    use_reference=True,
    group_algorithm=True,
    repeat_times=8,
)
# Trinity selects M2PO as policy_loss_fn: m2po (m2po_policy_loss.py) on GRPO advantages; the
# algorithm_type is that pairing under its own name
PRESETS["m2po"] = AlgorithmPreset(
    algorithm_type="m2po",
    policy_loss_fn="m2po",
    advantage_fn="grpo",
    advantage_fn_args={"epsilon": 1e-6},
    policy_loss_fn_args={"m2_threshold": 0.04, "log_ratio_clip": 20.0},
    kl_loss_fn="k2",
    kl_coef=0.001,
    use_reference=True,
    group_algorithm=True,
    repeat_times=8,
)
# RAFT: SFT on the rollouts that pass the reward filter (Trinity's RAFT workflows keep the
# successful episodes: reward 1)
PRESETS["raft"] = AlgorithmPreset(
    algorithm_type="raft",
    policy_loss_fn="sft",
    advantage_fn="raft",
    advantage_fn_args={"reward_threshold": 1.0},
    repeat_times=1,
)
# step-wise: each turn of an episode is an experience (the multi-turn workflows emit one per
# turn for these), the episode's reward broadcast to its turns
PRESETS["multi_step_grpo"] = AlgorithmPreset(
    algorithm_type="multi_step_grpo",
    policy_loss_fn="ppo",
    advantage_fn="step_wise_grpo",
    advantage_fn_args={
        "epsilon": 1e-6,
        "enable_step_norm": False,
        "std_cal_level": "group",
        "std_threshold": None,
    },
    policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
    kl_loss_fn="k2",
    kl_coef=0.001,
    use_reference=True,
    group_algorithm=True,
    repeat_times=8,
)
PRESETS["gigpo"] = AlgorithmPreset(
    algorithm_type="gigpo",
    policy_loss_fn="ppo",
    advantage_fn="gigpo",
    advantage_fn_args={"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
    policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.2, "clip_ratio_c": 3.0},
    kl_loss_fn="k2",
    kl_coef=0.001,
    use_reference=True,
    group_algorithm=True,
    repeat_times=8,
)
# GRPO with its advantages computed by the trainer over its batch (Trinity's GRPOverlAlgorithm),
# the algorithm of Clip_B's example (advantage_fn: clipb)
PRESETS["grpo_verl"] = AlgorithmPreset(
    algorithm_type="grpo_verl",
    policy_loss_fn="ppo",
    advantage_fn="grpo",
    advantage_fn_args={"epsilon": 1e-6},
    policy_loss_fn_args=dict(_PPO_CLIP_ARGS),
    kl_loss_fn="k2",
    kl_coef=0.001,
    applies_kl_penalty=True,
    use_reference=True,
    group_algorithm=True,
    repeat_times=8,
    compute_advantage_in_trainer=True,
)

# the algorithms whose experiences are the turns of multi-turn episodes
STEP_WISE_ADVANTAGE_FNS = ("step_wise_grpo", "gigpo")


def mixes_expert_data(algorithm_type: str) -> bool:
    """The algorithm mixes expert SFT rows into each trainer step (mix, mix_chord)."""
    return str(algorithm_type).lower() in ("mix", "mix_chord")


ALGORITHM_TYPES = tuple(PRESETS)

# Every algorithm_type Trinity-RFT registers (trinity/algorithm/__init__.py), with what it is:
# the ones not in PRESETS are refused as Trinity's, never "did you mean" another algorithm.
TRINITY_ALGORITHMS: dict[str, str] = {
    "sft": "supervised fine-tuning",
    "ppo": "PPO with a critic",
    "grpo": "GRPO",
    "reinforceplusplus": "REINFORCE++",
    "rloo": "RLOO",
    "opmd": "online policy mirror descent",
    "asymre": "asymmetric REINFORCE",
    "dpo": "DPO",
    "topr": "tapered off-policy REINFORCE",
    "cispo": "clipped IS-weight policy optimization",
    "gspo": "group sequence policy optimization",
    "sapo": "soft adaptive policy optimization",
    "mix": "RL mixed with expert SFT data",
    "mix_chord": "CHORD: RL mixed with expert SFT data",
    "raft": "SFT on the explorer's rewarded rollouts",
    "sppo": "sPPO",
    "rec": "REINFORCE with clipping",
    "multi_step_grpo": "step-wise GRPO for multi-turn agents",
    "gigpo": "group-in-group policy optimization for multi-turn agents",
    "grpo_verl": "GRPO with advantages computed in the trainer",
    "on_policy_distill": "on-policy distillation from a teacher's log-probs",
    "jsd": "Jensen-Shannon distillation from a teacher",
}


def refused_algorithms() -> dict[str, str]:
    """Names refused with a reason instead of a "did you mean": Trinity-RFT's algorithm types
    without a preset here, and ``dapo`` (a set of grpo arguments, not a type, in Trinity too).
    Each reason follows the quoted name in the error."""
    refused = {
        name: f"({what}) is a Trinity-RFT algorithm that RFT Studio does not implement"
        for name, what in TRINITY_ALGORITHMS.items()
        if name not in PRESETS
    }
    refused["dapo"] = (
        "is not an algorithm_type (nor in Trinity-RFT): DAPO is algorithm_type grpo with "
        "policy_loss_fn_args {clip_range_low: 0.2, clip_range_high: 0.28} and advantage_fn_args "
        "{std_threshold: 0.0} (dynamic sampling: groups whose rewards are all equal are dropped)"
    )
    return refused


def unknown_algorithm_message(algorithm_type: object) -> str:
    """Why ``algorithm_type`` is refused (``refused_algorithms``), or that it is not one of the
    implemented ones, with the closest of those when one is close."""
    key = str(algorithm_type).strip().lower()
    implemented = ", ".join(PRESETS)
    refused = refused_algorithms()
    if key in refused:
        return f"{algorithm_type!r} {refused[key]}; implemented: {implemented}"
    msg = f"{algorithm_type!r} is not one of {implemented}"
    close = closest_name(key, list(PRESETS))
    return f"{msg}; did you mean {close!r}?" if close else msg


def ignored_kl_penalty(algorithm_type: str, kl_penalty_fn: str | None) -> str | None:
    """The warning for a ``kl_penalty_fn`` that ``algorithm_type`` ignores (None: it applies, or
    none is set)."""
    if kl_penalty_fn is None or str(kl_penalty_fn).lower() == "none":
        return None
    preset = get_preset(algorithm_type)
    if preset.applies_kl_penalty:
        return None
    why = (
        "its advantages come from the explorer's raw rewards, before the trainer has reference "
        "log-probs"
        if preset.advantage_fn
        else "it trains on a dataset, without rewards"
    )
    return (
        f"algorithm.kl_penalty_fn: {kl_penalty_fn!r} is ignored for algorithm_type "
        f"{preset.algorithm_type} ({why}; Trinity-RFT ignores it there too). To keep the policy "
        "near the reference model use algorithm.kl_loss_fn (k2, k3 or low_var_kl) with "
        "kl_loss_fn_args.kl_coef; set kl_penalty_fn: none to silence this warning"
    )


def get_preset(algorithm_type: str) -> AlgorithmPreset:
    """A fresh copy of the preset for ``algorithm_type`` (case-insensitive)."""
    key = str(algorithm_type).lower()
    if key not in PRESETS:
        raise ConfigError(
            "algorithm.algorithm_type",
            unknown_algorithm_message(algorithm_type),
            value=algorithm_type,
            allowed=list(PRESETS),
        )
    return copy.deepcopy(PRESETS[key])
