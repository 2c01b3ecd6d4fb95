"""Buffer rules of the validator (``rft_core.config.validate``) that concern how many
experiences a step makes and the replay buffer; a module of their own to keep the validator
short. No torch, no registries: they read the config only.

- :func:`several_experiences_per_run`: the stall check's exception. An explorer step makes
  ``batch_size x repeat_times`` runs; a single-turn workflow makes one experience per run, so a
  ``train_batch_size`` above that would stall a synchronous run. A step-wise run makes one
  experience per *turn* (Trinity's multi-turn examples set ``train_batch_size`` to
  ``batch_size x repeat_times x max turns`` on purpose, e.g. "16*8*5"): it is step-wise when
  its algorithm is (the preset's ``step_wise`` flag, or a name of :data:`STEP_WISE_ALGORITHMS`)
  or its workflow is (:data:`SEVERAL_EXPERIENCES_WORKFLOWS`). Then the upper bound is the turn
  limit its ``workflow_args`` gives (:data:`TURN_LIMIT_ARGS`): above the bound still refused,
  at or below it accepted with a warning that a step whose episodes end early makes fewer
  (the trainer then waits for the next explorer step); no turn limit written: a warning.
- :func:`check_replay_buffer`: ``replay_buffer.enable`` acts on ``queue`` storage only (as in
  Trinity, whose file buffer has none; its sql replay is not reproduced) and on a queue the
  explorer of this job writes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rft_core.config.presets import get_preset
from rft_core.config.problems import refuse
from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config

# the one line both the config check and the queue give (rft_core.buffer imports it)
QUEUE_BETWEEN_JOBS_NEEDS_PATH = (
    "a queue without a path cannot reach another job: the explore job and the train job "
    "share experiences through the queue's path (e.g. sqlite:///experiences.db, the same in "
    "both YAMLs), or use storage_type sql / file"
)

log = logging.getLogger("rft_core.config")

STEP_WISE_ALGORITHMS = {"multi_step_grpo", "gigpo"}
# Trinity workflows that emit one experience per turn (or, trainable RULER, the judge's own
# rankings besides the answers): their examples set train_batch_size above the runs on purpose
SEVERAL_EXPERIENCES_WORKFLOWS = {
    "step_wise_alfworld_workflow",
    "math_trainable_ruler_workflow",
    "email_search_workflow",
    "agentscope_react_math_workflow",
    "agentscopev0_react_math_workflow",
    "agentscope_reactv2_math_workflow",
    "agentscope_reactv2_gsm8k_workflow",
    "agentscope_v1_react_search_workflow",
    "agentscope_workflow_adapter",
}
TURN_LIMIT_ARGS = ("max_env_steps", "env_max_steps", "max_steps", "max_turns", "agent_max_steps")


def several_experiences_per_run(cfg: Config, need: int, rollout_rows: int) -> bool:
    """True when ``need`` rollout experiences per trainer step can come from one explorer step
    of ``rollout_rows`` runs because the run is step-wise (module docstring; warns). False when
    the run makes one experience per run; a bound exceeded is refused here (True then: the
    caller has nothing more to say)."""
    a, b = cfg.algorithm, cfg.buffer

    tasksets = b.explorer_input.all_tasksets
    workflows = {ts.default_workflow_type for ts in tasksets}
    step_wise_algo = bool(getattr(get_preset(a.algorithm_type), "step_wise", False)) or (
        a.algorithm_type in STEP_WISE_ALGORITHMS
    )
    step_wise_flow = sorted(workflows & SEVERAL_EXPERIENCES_WORKFLOWS)
    if not step_wise_algo and not step_wise_flow:
        return False
    why = (
        f"algorithm_type {a.algorithm_type}" if step_wise_algo else f"workflow {step_wise_flow[0]}"
    )
    limits = [
        (f"{_path(ts)}.workflow_args.{key}", int(ts.workflow_args[key]))
        for ts in tasksets
        for key in TURN_LIMIT_ARGS
        if isinstance(ts.workflow_args.get(key), int) and ts.workflow_args[key] > 0
    ]
    if limits:
        where, turns = max(limits, key=lambda item: item[1])
        most = rollout_rows * turns
        if need > most:
            refuse(
                ConfigError(
                    "buffer.train_batch_size",
                    f"{need} rollout experiences per trainer step, but an explorer step makes at most "
                    f"buffer.batch_size {b.batch_size} x algorithm.repeat_times {a.repeat_times} x "
                    f"{where} {turns} = {most} ({why}: one experience per turn) and then waits for "
                    f"the trainer's weights: the run would stall; use at most {most}",
                    value=need,
                )
            )
            return True
        bound = f"at most {most} ({where} {turns} turns)"
    else:
        bound = "a number its workflow_args do not bound"
    log.warning(
        "buffer.train_batch_size = %d exceeds buffer.batch_size x algorithm.repeat_times = %d: "
        "accepted because %s makes one experience per turn (%s per step); a step whose episodes "
        "end early makes fewer, and a synchronous trainer then waits for the next explorer step",
        need,
        rollout_rows,
        why,
        bound,
    )
    return True


def check_replay_buffer(cfg: Config, eb: Any, path: str) -> None:
    """``replay_buffer.enable`` on a buffer it cannot act on: an error naming the key (each
    problem reported)."""
    rb = eb.replay_buffer
    if rb is None or not rb.enable:
        return
    key = f"{path}.replay_buffer.enable"
    if eb.storage_type != "queue":
        refuse(
            ConfigError(
                key,
                f"replays a queue's batches; storage_type {eb.storage_type} is read in order (set "
                "storage_type: queue, or replay_buffer.enable: false)",
                value=True,
            )
        )
    elif cfg.mode == "train":
        refuse(
            ConfigError(
                key,
                "replays the batches an explorer of this job puts in its queue; in mode train the "
                "explore job is another run and its experiences come through the queue's path, read "
                "in order (set it to false)",
                value=True,
            )
        )
    if rb.reuse_cooldown_time is not None and rb.reuse_cooldown_time < 0:
        refuse(
            ConfigError(
                f"{path}.replay_buffer.reuse_cooldown_time",
                f"must be >= 0 seconds (or null: never reused), got {rb.reuse_cooldown_time}",
                value=rb.reuse_cooldown_time,
            )
        )


def _path(ts: Any) -> str:
    return getattr(ts, "_yaml_path", None) or "buffer.explorer_input.taskset"
