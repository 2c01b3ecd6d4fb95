"""What the policy-update tests train on (``trainer/``, ``config/test_trainer_config.py``): an
algorithm config and experiences rolled out from a model directory (``tiny_lm``'s) on the
``hf`` engine."""

from __future__ import annotations

from rft_core.config.schema import AlgorithmConfig, OptimizerConfig
from rft_core.experience import Experience
from rft_core.rollout import SamplingParams, build_engine

CONVERSATIONS = [
    [{"role": "user", "content": "1+2=?"}],
    [{"role": "user", "content": "what is 12*3?"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
]


def algorithm(kind: str = "grpo", lr: float = 1e-3, **kwargs) -> AlgorithmConfig:
    """An algorithm config of ``kind`` with its optimizer at ``lr``; ``kwargs`` are its fields."""
    optimizer = OptimizerConfig(lr=lr, **kwargs.pop("optimizer", {}))
    return AlgorithmConfig(algorithm_type=kind, optimizer=optimizer, **kwargs)


def rollout(model_dir: str, temperature: float = 0.8, n: int = 4, max_tokens: int = 12):
    """``n`` samples of each of ``CONVERSATIONS`` on the hf engine, as experiences rewarded 0, 1,
    0, 1, ... in each group (advantages -1, 1, ...)."""
    engine = build_engine("hf", model_dir, seed=1)
    groups = engine.chat(
        CONVERSATIONS, SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens)
    )
    experiences = []
    for g, group in enumerate(groups):
        for i, gen in enumerate(group):
            experiences.append(
                Experience(
                    prompt_ids=gen.prompt_ids,
                    response_ids=gen.response_ids,
                    logprobs=gen.logprobs,
                    reward=float(i % 2),
                    advantage=1.0 if i % 2 else -1.0,
                    group_id=f"g{g}",
                    truncated=gen.finish_reason == "length",
                )
            )
    return experiences
