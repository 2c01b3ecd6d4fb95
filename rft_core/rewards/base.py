"""The reward-function plug-in point: the ``REWARD_FNS`` registry, ``register`` / ``get`` /
``names``, the check of a taskset's ``reward_fn_args`` and ``score`` (call one, check that it
returned named finite numbers). Built-in functions (``rft_core.rewards.math``) register here;
``rft_core.rewards`` is the package face users import."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from math import isfinite, nan
from typing import Any

from rft_core.errors import ConfigError, RFTError
from rft_core.registry import Registry

RewardFn = Callable[..., dict[str, float]]

REWARD_FN_PATH = "buffer.explorer_input.taskset.default_reward_fn_type"

REWARD_FNS: Registry[RewardFn] = Registry("reward function", REWARD_FN_PATH)

# arguments the workflow fills in, never reward_fn_args: a function that declares
# ``response_length`` gets the response's token count (DAPO's overlong penalty needs it)
_FILLED_IN = ("response", "truth", "response_length")


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering a reward function under ``name`` (a second use of a name fails)."""
    return REWARD_FNS.register(name)


def get(name: str, *, path: str | None = None) -> RewardFn:
    """The reward function registered as ``name``; unknown names raise a ConfigError that lists
    the registered ones."""
    return REWARD_FNS.get(name, path=path)


def names() -> list[str]:
    return REWARD_FNS.names()


def check_args(name: str, args: Mapping[str, Any], *, path: str = "reward_fn_args") -> None:
    """Reject ``reward_fn_args`` keys the function does not accept, before any generation runs."""
    params = inspect.signature(get(name)).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in _FILLED_IN
    ]
    for key in args:
        if key not in accepted:
            raise ConfigError(
                f"{path}.{key}",
                f"reward function {name!r} takes no argument {key!r}; "
                f"it accepts: {', '.join(accepted) or 'none'}",
                value=key,
                allowed=accepted,
            )


def score(
    name: str,
    response: str,
    truth: str | None,
    args: Mapping[str, Any] | None = None,
    *,
    response_length: int | None = None,
) -> dict[str, float]:
    """Call reward function ``name`` and check that it returned named finite numbers;
    ``response_length`` (tokens) reaches functions that declare that argument."""
    fn = get(name)
    kwargs = dict(args or {})
    if response_length is not None and "response_length" in inspect.signature(fn).parameters:
        kwargs["response_length"] = response_length
    try:
        parts = fn(response, "" if truth is None else truth, **kwargs)
    except RFTError:
        raise
    except Exception as err:
        raise RFTError(f"reward function {name!r} failed: {type(err).__name__}: {err}") from err
    if not isinstance(parts, Mapping) or not parts:
        raise RFTError(
            f"reward function {name!r} must return a non-empty dict of name -> number, "
            f"got {parts!r}"
        )
    out: dict[str, float] = {}
    for key, value in parts.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = nan
        if not isinstance(key, str) or not isfinite(number):
            raise RFTError(
                f"reward function {name!r} returned {key!r}: {value!r}; "
                "each part must be a finite number under a string name"
            )
        out[key] = number
    return out
