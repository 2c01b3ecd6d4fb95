"""Names and arguments a config hands to the registries (workflows, rewards, advantage fns,
policy losses, KL fns, experience buffers, rollout engines, monitors), checked before a run
starts.

Kept out of ``validate`` because the registries import torch (seconds, and memory the web
process should not pay for a form); ``run_experiment`` and ``trinity run --dry-run`` call it.

The check reads a *table* of what is registered: the workflow, reward, KL fn, buffer
storage-type, engine-type and monitor-type names, and per advantage fn / policy loss the
arguments a config may set with their defaults. The caller hands it in, so this package imports
no registry (``rft_core.config`` is a leaf): ``rft_core.registries.registered_names_table()`` builds
it from the live registries (imports torch; what ``trinity run`` uses, so plug-ins a user
registered count), and ``registered_names.json`` beside this file is that table committed, for
the web process, which checks web-submitted configs against the built-in names without importing
torch (a web user cannot register code, so the built-ins are the whole truth there), and for the
schema: the ``choices`` of the fields that pick a KL fn, a storage type, an engine type or a
monitor type are ``committed_names.registered_choices(...)`` of it, so the config loader, the
reference YAML and the web forms list what the registries hold. A new plug-in point's key goes
into the JSON by hand once before the schema asks for it (the generator imports the schema).
``tests/core/config/test_registered_names.py`` fails when it is stale:

    python -m rft_core.registries   # rewrites rft_core/config/registered_names.json
"""

from __future__ import annotations

import difflib
import logging
from typing import TYPE_CHECKING, Any

from rft_core.config.presets import get_preset
from rft_core.config.validate import resolve_stages
from rft_core.errors import ConfigError
from rft_core.registry import Registry

if TYPE_CHECKING:  # the schema reads this module's table for its choices
    from rft_core.config.schema import Config

log = logging.getLogger(__name__)

# Trinity's KL fn arguments: kl_coef is used; the adaptive controller is not built here
_KL_ARGS = ["kl_coef"]
_KL_ARGS_IGNORED = ["adaptive", "target_kl", "horizon"]
# Trinity reward functions that call a service outside the job: what each needs
_OPENJUDGE = (
    "an outside OpenAI-compatible judge API (OpenJudge graders; reward_fn_args model_name, "
    "judge_api_base_url_env, judge_api_key_env)"
)
OUTSIDE_SERVICE_REWARDS = {
    "trajectory_accuracy_grader_reward": _OPENJUDGE,
    "openjudge_multi_grader_reward": _OPENJUDGE,
    "rm_gallery_reward": "the RM-Gallery package and the reward model service it is set up for",
}
# Trinity's environment workflows whose simulators are packages of their own, not installed with
# RFT Studio: a config naming one is refused with the package to install (and a plugin
# directory, --plugin-dir, can register the workflow once it is)
SIMULATOR_PACKAGES = {
    "alfworld_workflow": "alfworld",
    "RAFT_alfworld_workflow": "alfworld",
    "RAFT_reflect_alfworld_workflow": "alfworld",
    "sciworld_workflow": "scienceworld",
    "webshop_workflow": "webshop",
    "step_wise_alfworld_workflow": "alfworld",
    "agentscope_workflow_adapter": "agentscope",
    "agentscope_workflow_adapter_v1": "agentscope",
}
# Trinity's agent workflows whose tools are a service outside the job: what each needs (the
# model-only agents run on the OpenAI endpoint: rft_core/workflows/react_math.py)
OUTSIDE_SERVICE_WORKFLOWS = {
    "agentscope_v1_react_search_workflow": "a web search API (Tavily or SearXNG, "
    "workflow_args.search_client_type) for its search tools",
    "email_search_workflow": "the Enron e-mail corpus database its search_emails / read_email "
    "tools query (built by Trinity's prepare_data.py)",
    "bcp_simple_react_workflow": "the BrowseComp-Plus document index its search tool queries",
    "agentopia_workflow": "an AgentOpia / AppWorld environment service over HTTP",
}
# Trinity's other workflows that RFT Studio does not implement: what each is, for the refusal
# (a plugin directory can register one under the same name)
TRINITY_WORKFLOWS_NOT_HERE = {
    "simple_mm_workflow": "multimodal prompts with images; RFT Studio's engines and trainer are "
    "text-only",
    "math_eval_workflow": "math evaluation with its own answer checker; evaluate with "
    "math_boxed_workflow or math_workflow in buffer.explorer_input.eval_tasksets",
}


def check_registered_names(cfg: Config, table: dict[str, Any]) -> None:
    """Every workflow, reward function, advantage function and policy loss the config names is
    registered, and their ``*_fn_args`` hold no misspelt argument. ``table``: what counts as
    registered. ``table``: what counts as registered, the live registries
    (``rft_core.registries.registered_names_table()``, what ``trinity run`` checks against) or the
    committed ``registered_names.json`` (``committed_names.committed_registered_names()``, the
    web's table)."""
    advantage_fns = _registry(
        "advantage function", "algorithm.advantage_fn", table["advantage_fns"]
    )
    workflows = _registry("workflow", "", table["workflows"])
    rewards = _registry("reward function", "", table["reward_fns"])
    policy_losses = _registry("policy loss", "", table["policy_loss_fns"])
    for i, stage in enumerate(resolve_stages(cfg)):
        prefix = f"stages[{i}]." if cfg.stages and cfg.stages[i].algorithm is not None else ""
        if stage.algorithm.advantage_fn:
            advantage_fns.get(stage.algorithm.advantage_fn, path=f"{prefix}algorithm.advantage_fn")
        if stage.algorithm.policy_loss_fn:
            policy_losses.get(
                stage.algorithm.policy_loss_fn, path=f"{prefix}algorithm.policy_loss_fn"
            )
        _check_fn_args(stage.algorithm, prefix, table)
        ei = stage.buffer.explorer_input
        for ts in [*ei.all_tasksets, *ei.eval_tasksets]:
            where = getattr(ts, "_yaml_path", "buffer.explorer_input.taskset")  # stage's own
            _check_workflow(workflows, ts.default_workflow_type, f"{where}.default_workflow_type")
            _check_workflow_args(ts, where, table, rewards)
            if ts.default_reward_fn_type:
                path = f"{where}.default_reward_fn_type"
                if ts.default_reward_fn_type not in rewards:
                    _refuse_outside_judge(ts.default_reward_fn_type, path)
                rewards.get(ts.default_reward_fn_type, path=path)


def _refuse_outside_judge(name: str, path: str) -> None:
    needs = OUTSIDE_SERVICE_REWARDS.get(name)
    if needs:
        raise ConfigError(
            path,
            f"{name!r} needs {needs}, which RFT Studio does not call; judge with a model in "
            "explorer.auxiliary_models through default_workflow_type: math_rm_workflow (or "
            "math_ruler_workflow) instead",
            value=name,
        )


def _not_set(value: Any) -> bool:
    return value is None or value is False


def _check_workflow_args(ts: Any, where: str, table: dict[str, Any], rewards: Any) -> None:
    """``workflow_args`` and ``reward_fn_args`` of taskset ``ts`` against what its workflow and
    reward function take: a key they take passes; a key the workflow refuses (Trinity's
    workflow takes it, this one does not apply it, so ignoring it would change results) set to
    anything but false/null, a close misspelling of a taken key, or a ``reward_fn_args`` key the
    reward function does not take is an error; any other key is a warning naming its path."""
    entry = table.get("workflow_args", {}).get(ts.default_workflow_type)
    args = ts.workflow_args or {}
    fn_type = args.get("reward_fn_type")
    if isinstance(fn_type, str) and fn_type not in rewards:  # Trinity's newer frozen lake
        _refuse_outside_judge(fn_type, f"{where}.workflow_args.reward_fn_type")
    if entry is not None:
        takes, refuses = list(entry["takes"]), dict(entry["refuses"])
        for key, value in args.items():
            path = f"{where}.workflow_args.{key}"
            if key in takes:
                continue
            if key in refuses:
                if not _not_set(value):
                    raise ConfigError(path, refuses[key], value=value)
                continue
            close = difflib.get_close_matches(key, takes, n=1, cutoff=0.75)
            if close:
                raise ConfigError(
                    path,
                    f"{ts.default_workflow_type} takes no argument {key!r}; did you mean "
                    f"{close[0]!r}? it takes: {', '.join(takes)}",
                    allowed=takes,
                )
            log.warning(
                "%s: not taken by %s, ignored (it takes: %s)",
                path,
                ts.default_workflow_type,
                ", ".join(takes) or "none",
            )
        if not entry["uses_reward_fn"]:
            for key in ("default_reward_fn_type", "reward_fn_args"):
                if getattr(ts, key, None):
                    log.warning(
                        "%s.%s: not used by %s (it scores on its own), ignored",
                        where,
                        key,
                        ts.default_workflow_type,
                    )
            return
    fn = ts.default_reward_fn_type or (entry or {}).get("default_reward_fn")
    fn_args = ts.reward_fn_args or {}
    if not fn:
        for key in fn_args:
            log.warning(
                "%s.reward_fn_args.%s: no reward function is set to take it, ignored", where, key
            )
        return
    accepted = table.get("reward_fn_args", {}).get(fn, None)
    if accepted is None or fn not in rewards:
        return  # takes any keyword, or unknown (refused by its own check)
    for key in fn_args:
        if key not in accepted:
            raise ConfigError(
                f"{where}.reward_fn_args.{key}",
                f"reward function {fn!r} takes no argument {key!r}; it accepts: "
                f"{', '.join(accepted) or 'none'}",
                value=key,
                allowed=list(accepted),
            )


def _check_workflow(workflows: Registry[None], name: str, path: str) -> None:
    if name in SIMULATOR_PACKAGES and name not in workflows:
        package = SIMULATOR_PACKAGES[name]
        raise ConfigError(
            path,
            f"workflow {name!r} needs the {package!r} package (its simulator), which is not "
            f"installed; install {package} and register the workflow from a plugin directory "
            "(trinity run --plugin-dir DIR)",
            value=name,
        )
    if name in OUTSIDE_SERVICE_WORKFLOWS and name not in workflows:
        raise ConfigError(
            path,
            f"workflow {name!r} needs {OUTSIDE_SERVICE_WORKFLOWS[name]}, a service outside the "
            "job that RFT Studio does not run; run that service and register the workflow from "
            "a plugin directory (trinity run --plugin-dir DIR), its agent on the run's OpenAI "
            "endpoint (README: agent code in a workflow)",
            value=name,
        )
    if name in TRINITY_WORKFLOWS_NOT_HERE and name not in workflows:
        raise ConfigError(
            path,
            f"workflow {name!r} (Trinity-RFT's {TRINITY_WORKFLOWS_NOT_HERE[name]}) is not "
            f"implemented in RFT Studio; registered: {', '.join(workflows.names())}; a plugin "
            "directory (trinity run --plugin-dir DIR) can register it",
            value=name,
        )
    if name.count(".") >= 2 and name.rsplit(".", 1)[-1][:1].isupper() and name not in workflows:
        raise ConfigError(
            path,
            f"{name!r} is a Python class path, which Trinity-RFT imports from its repository "
            "(examples/ is not part of RFT Studio, and a config never names code to import); "
            "register the class with @workflows.register in a file of a plugin directory "
            "(trinity run --plugin-dir DIR) and name it here",
            value=name,
        )
    workflows.get(name, path=path)


def _registry(kind: str, path: str, names: Any) -> Registry[None]:
    registry: Registry[None] = Registry(kind, path)
    for name in names:
        registry.add(name, None)
    return registry


def _check_fn_args(algorithm: Any, prefix: str, table: dict[str, Any]) -> None:
    """A key of ``*_fn_args`` close to one the function takes is a typo: an error naming it
    (``kl_coeff`` -> ``kl_coef``). Other unknown keys are warned about and ignored (Trinity
    configs carry keys for features this engine does not have)."""
    preset = get_preset(getattr(algorithm, "algorithm_type", "grpo"))
    loss = str(algorithm.policy_loss_fn or preset.policy_loss_fn).lower()
    advantage_fn = algorithm.advantage_fn or preset.advantage_fn
    known = {
        "policy_loss_fn_args": (list(table["policy_loss_fns"][loss]), []),
        "kl_loss_fn_args": (_KL_ARGS, _KL_ARGS_IGNORED),
        "kl_penalty_fn_args": (_KL_ARGS, _KL_ARGS_IGNORED),
        "entropy_loss_fn_args": (["entropy_coef"], []),
    }
    defaults = {"policy_loss_fn_args": table["policy_loss_fns"][loss]}
    if advantage_fn:
        known["advantage_fn_args"] = (list(table["advantage_fns"][advantage_fn]), [])
        defaults["advantage_fn_args"] = table["advantage_fns"][advantage_fn]
    for section, (accepted, ignored) in known.items():
        args = getattr(algorithm, section, None) or {}
        for key in args:
            if key in accepted:
                path = f"{prefix}algorithm.{section}.{key}"
                _check_arg_type(args, key, defaults.get(section, {}).get(key), path)
                continue
            path = f"{prefix}algorithm.{section}.{key}"
            close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.75)
            if close and key not in ignored:
                raise ConfigError(
                    path,
                    f"unknown argument {key!r}; did you mean {close[0]!r}? "
                    f"accepted: {', '.join(accepted) or 'none'}",
                    allowed=accepted,
                )
            log.warning(
                "%s: not used by this engine, ignored (used: %s)", path, ", ".join(accepted)
            )


def _check_arg_type(args: dict[str, Any], key: str, default: Any, path: str) -> None:
    """A function argument whose default is a number (or a bool) takes a number (a bool): a
    number written as a string ("1e-6") is read as the number, anything else is an error here
    rather than a TypeError in the trainer's first step."""
    value = args[key]
    if isinstance(default, bool) or isinstance(value, bool) or value is None:
        if isinstance(default, bool) and not isinstance(value, bool) and value is not None:
            raise ConfigError(path, f"must be true or false, got {value!r}", value=value)
        return
    if isinstance(default, int | float) and not isinstance(value, int | float):
        try:
            number = float(value)
            args[key] = int(number) if isinstance(default, int) and number.is_integer() else number
        except (TypeError, ValueError):
            raise ConfigError(
                path, f"must be a number (default {default}), got {value!r}", value=value
            ) from None
