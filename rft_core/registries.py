"""What the registries hold now, built-ins and plug-ins alike: the table
``rft_core.config.registered`` checks a config against (workflow, reward, KL fn, buffer
storage-type, engine-type and monitor-type names; per advantage fn / policy loss the arguments
a config may set with their defaults; per workflow and reward fn the ``*_args`` keys they take).

Imports every registry (torch): ``trinity run`` calls it after loading the user's plug-ins
(``rft_core.plugins``), so their names count. ``config/registered_names.json`` is this table
committed for the torch-free web process; a test fails when it is stale:

    python -m rft_core.registries   # rewrites rft_core/config/registered_names.json
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

from rft_core import rewards, workflows
from rft_core.algorithms.advantages import ADVANTAGE_FNS
from rft_core.algorithms.kl import KL_FNS
from rft_core.algorithms.policy_losses import POLICY_LOSSES
from rft_core.buffer import BUFFERS
from rft_core.config.committed_names import REGISTERED_NAMES_FILE
from rft_core.monitor import MONITORS
from rft_core.rewards.base import _FILLED_IN
from rft_core.rollout import ENGINES

# arguments the trainer passes itself, never from the config (mixed losses: also the step and
# its rollout/expert counts)
_INTERNAL_ARGS = {
    "horizon",
    "loss_agg_mode",
    "sum_across_ranks",
    "step",
    "usual_totals",
    "expert_totals",
    "turns",  # step-wise advantage fns: the experiences' places in their episodes
    "m2po_mask",  # m2po: the step's token mask, computed by the trainer
}


def registered_names_table() -> dict[str, Any]:
    """What is registered now: ``workflows``, ``reward_fns``, ``kl_fns``, ``storage_types``,
    ``engine_types``, ``monitor_types`` (names), ``advantage_fns`` and ``policy_loss_fns`` (name -> {settable
    argument: default}), ``workflow_args`` (per workflow what its ``workflow_args`` may hold,
    ``rft_core.workflows.workflow_args_table``) and ``reward_fn_args`` (per reward function the
    ``reward_fn_args`` keys it takes; null: any)."""
    return {
        "workflows": workflows.names(),
        "reward_fns": rewards.names(),
        "workflow_args": workflows.workflow_args_table(),
        "reward_fn_args": {n: _reward_args(rewards.get(n)) for n in rewards.names()},
        "advantage_fns": {n: _settable(ADVANTAGE_FNS.get(n).fn) for n in ADVANTAGE_FNS.names()},
        "policy_loss_fns": {n: _settable(POLICY_LOSSES.get(n).fn) for n in POLICY_LOSSES.names()},
        "kl_fns": KL_FNS.names(),
        "storage_types": BUFFERS.names(),
        "engine_types": ENGINES.names(),
        "monitor_types": MONITORS.names(),
    }


def registered_names_text() -> str:
    """``registered_names_table()`` as ``registered_names.json`` holds it (order kept: the
    choices and the web form's argument fields follow it)."""
    return json.dumps(registered_names_table(), indent=2) + "\n"


def write_registered_names_table(path: Path = REGISTERED_NAMES_FILE) -> None:
    path.write_text(registered_names_text())


def _reward_args(fn: Any) -> list[str] | None:
    """The ``reward_fn_args`` keys reward function ``fn`` takes; None when it takes any."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.name not in _FILLED_IN
    ]


def _settable(fn: Any) -> dict[str, Any]:
    """The keyword arguments of ``fn`` a config may set (those with defaults), with the defaults."""
    return {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not p.empty and name not in _INTERNAL_ARGS
    }


if __name__ == "__main__":
    write_registered_names_table()
    print(f"wrote {REGISTERED_NAMES_FILE}")
