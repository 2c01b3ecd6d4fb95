"""The validator's rules for the ``buffer`` section (``rft_core.config.validate`` calls
:func:`derive_buffer`): batch sizes, the explorer's tasksets (each filled from the global
defaults and ``model.*``: workflow, reward, format, sampling, lengths) and the trainer's
experience buffer. Each rule reports its error and goes on, as the validator's do; the ones
that concern how many experiences a run makes and keeps are in ``rft_core.config.buffer_checks``.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from rft_core.config.buffer_checks import (
    QUEUE_BETWEEN_JOBS_NEEDS_PATH,
    check_replay_buffer,
    several_experiences_per_run,
)
from rft_core.config.expert_data import check_expert_data, expert_rows_per_step
from rft_core.config.presets import get_preset, mixes_expert_data
from rft_core.config.problems import at_least, refuse, report
from rft_core.config.schema import Config, ExperienceBufferConfig, TasksetConfig
from rft_core.config.workflow_columns import point_format_at_workflow_columns
from rft_core.errors import ConfigError

DEFAULT_WORKFLOW = "math_workflow"


def check_sampling(section: Any, path: str) -> None:
    """temperature, top_p and top_k of ``model`` or a taskset's ``rollout_args`` (unset: None)."""
    t, p, k = section.temperature, section.top_p, section.top_k
    if t is not None and t < 0:
        report(ConfigError(f"{path}.temperature", f"must be >= 0, got {t}", value=t))
    if p is not None and not 0.0 < p <= 1.0:
        report(ConfigError(f"{path}.top_p", f"must be in (0, 1], got {p}", value=p))
    if k is not None and k < -1:
        report(
            ConfigError(f"{path}.top_k", f"must be -1 or 0 (off) or a positive k, got {k}", value=k)
        )


def derive_buffer(cfg: Config) -> None:
    """Batch sizes, tasksets and the experience buffer. Each rule reports and goes on; a
    ``train_batch_size`` that is required but missing has ``batch_size x repeat_times`` stand
    in; the mix checks stop at a bad ``expert_data_ratio`` or a missing expert dataset
    (``rft_core.config.expert_data``), and then count no expert rows."""
    b, a = cfg.buffer, cfg.algorithm
    if not at_least(b.batch_size, "buffer.batch_size", 1):
        b.batch_size = 1  # reported; 1 stands in so that derived sizes do not repeat the error
    at_least(b.total_epochs, "buffer.total_epochs", 1)
    at_least(b.total_steps, "buffer.total_steps", 1)
    supervised = not get_preset(a.algorithm_type).use_rollout
    if b.train_batch_size is None:
        if supervised or cfg.mode == "train":
            why = f"algorithm_type {a.algorithm_type}" if supervised else "mode train"
            refuse(
                ConfigError(
                    "buffer.train_batch_size",
                    f"required with {why}: the number of examples per trainer step (there are no rollouts to count)",
                )
            )
        b.train_batch_size = b.batch_size * a.repeat_times
    at_least(b.train_batch_size, "buffer.train_batch_size", 1)

    ei = b.explorer_input
    if ei.taskset is not None and ei.tasksets:
        refuse(
            ConfigError(
                "buffer.explorer_input.taskset",
                "give either taskset or tasksets, not both (move it into tasksets)",
            )
        )
    explores = cfg.mode in ("both", "explore", "colocate") and not supervised
    if explores and not ei.all_tasksets:
        refuse(
            ConfigError(
                "buffer.explorer_input.taskset",
                f"required in mode {cfg.mode}: the tasks the explorer rolls out (name, path, format.prompt_key, ...)",
            )
        )
    if cfg.mode == "bench" and not ei.eval_tasksets:
        refuse(
            ConfigError(
                "buffer.explorer_input.eval_tasksets",
                "required in mode bench: the tasksets to evaluate",
            )
        )
    if ei.taskset is not None:
        _derive_taskset(cfg, ei.taskset, "buffer.explorer_input.taskset", is_eval=False)
    for i, ts in enumerate(ei.tasksets):
        _derive_taskset(cfg, ts, f"buffer.explorer_input.tasksets[{i}]", is_eval=False)
        first = ei.tasksets[0].rollout_args.temperature
        if ts.rollout_args.temperature != first:
            refuse(
                ConfigError(
                    f"buffer.explorer_input.tasksets[{i}].rollout_args.temperature",
                    f"{ts.rollout_args.temperature} differs from tasksets[0]'s {first}: the tasksets "
                    "of one run share a rollout temperature (the trainer scores every experience at it)",
                    value=ts.rollout_args.temperature,
                )
            )
    rollout_rows = b.batch_size * a.repeat_times
    # mix, mix_chord: part of each trainer step is expert data, not rollouts
    expert_rows = 0
    if mixes_expert_data(a.algorithm_type):
        if check_expert_data(cfg):
            expert_rows = expert_rows_per_step(cfg)
    if (
        cfg.mode in ("both", "colocate")
        and not supervised
        and b.train_batch_size - expert_rows > rollout_rows
        and not several_experiences_per_run(cfg, b.train_batch_size - expert_rows, rollout_rows)
    ):
        refuse(
            ConfigError(
                "buffer.train_batch_size",
                f"{b.train_batch_size - expert_rows} rollout experiences per trainer step"
                + (f" (besides {expert_rows} expert rows)" if expert_rows else "")
                + ", but an explorer step makes "
                f"buffer.batch_size {b.batch_size} x algorithm.repeat_times {a.repeat_times} = "
                f"{rollout_rows} and then waits for the trainer's weights: the run would stall; "
                f"use at most {rollout_rows}",
                value=b.train_batch_size,
            )
        )
    names: dict[str, int] = {}
    for i, ts in enumerate(ei.eval_tasksets):
        path = f"buffer.explorer_input.eval_tasksets[{i}]"
        _derive_taskset(cfg, ts, path, is_eval=True)
        if ts.name in names:
            refuse(
                ConfigError(
                    f"{path}.name",
                    f"duplicate eval taskset name {ts.name!r} (also eval_tasksets[{names[ts.name]}]); metric names eval/<name>/... would collide",
                    value=ts.name,
                )
            )
            continue
        names[ts.name] = i
    _derive_experience_buffer(cfg)


def _derive_taskset(cfg: Config, ts: TasksetConfig, path: str, *, is_eval: bool) -> None:
    ei, m = cfg.buffer.explorer_input, cfg.model
    ts._yaml_path = path  # data errors name the taskset's place in the YAML
    if ts.storage_type == "file" and not (ts.path or "").strip():
        refuse(
            ConfigError(
                f"{path}.path",
                "required: a dataset directory, a .jsonl/.json/.parquet file or a cached dataset name",
            )
        )
    if not ts.name.strip():
        ts.name = PurePosixPath(str(ts.path or "taskset").rstrip("/")).name or "taskset"
    at_least(ts.index, f"{path}.index", 0)
    default_wf = (ei.default_eval_workflow_type if is_eval else None) or ei.default_workflow_type
    ts.default_workflow_type = ts.default_workflow_type or default_wf or DEFAULT_WORKFLOW
    ts.default_reward_fn_type = ts.default_reward_fn_type or ei.default_reward_fn_type
    point_format_at_workflow_columns(ts)  # a workflow that reads its own columns (toolcall)
    if ts.format.system_prompt is None:
        ts.format.system_prompt = ei.system_prompt
    if ts.format.reply_prefix is None:
        ts.format.reply_prefix = ei.reply_prefix
    if is_eval:
        if (
            ts.repeat_times is None
        ):  # k of eval metrics @k; Trinity configs also write rollout_args.n
            ts.repeat_times = ts.rollout_args.n or 1
        at_least(ts.repeat_times, f"{path}.repeat_times", 1)
        n = ts.repeat_times
    else:
        n = cfg.algorithm.repeat_times
        if ts.repeat_times is not None and ts.repeat_times != n:
            refuse(
                ConfigError(
                    f"{path}.repeat_times",
                    f"got {ts.repeat_times}, but training tasksets are rolled out algorithm.repeat_times "
                    f"({n}) times; set it there, not here",
                    value=ts.repeat_times,
                )
            )
        ts.repeat_times = n
    r = ts.rollout_args
    if r.n is not None and r.n != n:
        source = f"{path}.repeat_times" if is_eval else "algorithm.repeat_times"
        refuse(
            ConfigError(
                f"{path}.rollout_args.n",
                f"got {r.n}, but it is set from {source} ({n}); set it there",
                value=r.n,
            )
        )
    r.n = n
    # a value taken over from model.* is checked, and reported, where it was written
    check_sampling(r, f"{path}.rollout_args")
    r.temperature = m.temperature if r.temperature is None else r.temperature
    r.top_p = m.top_p if r.top_p is None else r.top_p
    r.top_k = m.top_k if r.top_k is None else r.top_k
    r.logprobs = m.logprobs if r.logprobs is None else r.logprobs
    r.max_tokens = m.max_response_tokens if r.max_tokens is None else r.max_tokens
    at_least(r.max_tokens, f"{path}.rollout_args.max_tokens", 1)
    if r.max_tokens > m.max_response_tokens and "model.max_response_tokens" not in cfg._stand_ins:
        refuse(
            ConfigError(
                f"{path}.rollout_args.max_tokens",
                f"{r.max_tokens} exceeds model.max_response_tokens {m.max_response_tokens}; lower it or raise that",
                value=r.max_tokens,
            )
        )


def _derive_experience_buffer(cfg: Config) -> None:
    """The trainer's input. A required buffer that is missing is reported and ends this rule
    (the checks below read the buffer's keys); the others report and go on."""
    ti, path = cfg.buffer.trainer_input, "buffer.trainer_input.experience_buffer"
    supervised = not get_preset(cfg.algorithm.algorithm_type).use_rollout
    reads_dataset = cfg.mode == "train" or supervised
    if ti.experience_buffer is None:
        if reads_dataset and not supervised:
            refuse(
                ConfigError(
                    path,
                    "required in mode train: the buffer the explore job writes (name, storage_type sql "
                    "or queue, path sqlite:///experiences.db; the same in both YAMLs)",
                )
            )
            return
        if reads_dataset:
            refuse(
                ConfigError(
                    path,
                    "required: the dataset the trainer reads (name, path to a .jsonl/.parquet file or dataset directory)",
                )
            )
            return
        ti.experience_buffer = ExperienceBufferConfig()
    eb = ti.experience_buffer
    eb._yaml_path = path
    if eb.storage_type is None:
        eb.storage_type = "file" if reads_dataset else "queue"
    if cfg.mode == "train" and not supervised and eb.storage_type == "queue" and not eb.path:
        # an explore job writes it; the two jobs meet at the queue's path (build_buffer between_jobs)
        refuse(ConfigError(f"{path}.path", QUEUE_BETWEEN_JOBS_NEEDS_PATH))
    if supervised and eb.storage_type == "queue":
        refuse(
            ConfigError(
                f"{path}.storage_type",
                f"queue has no writer in mode {cfg.mode} with algorithm_type {cfg.algorithm.algorithm_type}; "
                "use file (a dataset) or sql",
                value="queue",
                allowed=["file", "sql"],
            )
        )
    if eb.storage_type in ("file", "sql") and not (eb.path or "").strip():
        refuse(ConfigError(f"{path}.path", f"required for storage_type {eb.storage_type}"))
    at_least(eb.capacity, f"{path}.capacity", 1)
    check_replay_buffer(cfg, eb, path)
