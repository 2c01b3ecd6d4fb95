"""Reward functions: plain callables ``fn(response: str, truth: str, **kwargs) -> dict[str, float]``
registered by name. The parts a function returns are summed into the experience's reward and
logged as ``rollout/<part>/{mean,max,min}``.

    from rft_core import rewards

    @rewards.register("length_penalty")
    def length_penalty(response: str, truth: str, *, per_char: float = 0.001) -> dict[str, float]:
        return {"length_penalty": -per_char * len(response)}

Tasksets pick one with ``default_reward_fn_type`` (or per row through ``format.reward_fn_key``);
``reward_fn_args`` become the keyword arguments.
"""

from rft_core.rewards import boxed as _boxed_rewards  # noqa: F401  (built-ins register on import)
from rft_core.rewards import countdown as _countdown_reward  # noqa: F401
from rft_core.rewards import math as _math_rewards  # noqa: F401
from rft_core.rewards import rlcr as _rlcr_reward  # noqa: F401
from rft_core.rewards import toolcall as _toolcall_reward  # noqa: F401
from rft_core.rewards.base import REWARD_FNS, RewardFn, check_args, get, names, register, score

__all__ = ["REWARD_FNS", "RewardFn", "check_args", "get", "names", "register", "score"]
