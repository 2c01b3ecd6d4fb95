"""Cross-field rules and derived values: the validator's entry points and its rules for every
section but ``buffer`` (``rft_core.config.validate_buffer``).

``validate(cfg)`` fills every field declared with ``derived_from`` (``rft_core.config.meta``)
and rejects combinations that cannot run, each with a ConfigError naming the YAML
path. Every rule reports its error (``rft_core.config.problems.refuse``) and goes on, so a load
shows all the independent problems at once, with a stand-in value where a later rule reads the
one refused (the preset's ``repeat_times``, ``batch_size x repeat_times`` for a missing
``train_batch_size``, 1 for a length that has no room). Where continuing would only produce
nonsense, the rule stops at its first problem: a missing experience buffer ends its own checks
(``validate_buffer._derive_experience_buffer``), a bad ``expert_data_ratio`` or missing expert dataset ends the
mix checks (``expert_data.check_expert_data``), ``resources.check_cluster`` and
``check_world_size`` report their first problem only (each check reads what the one before
found consistent), and anything still raised inside a stage ends that stage's rules only.
Decisions (where Trinity is silent or where TRINITY_COMPAT.md asks for a fix):

- ``algorithm.*`` unset -> the preset of ``algorithm_type`` (``rft_core.config.presets``):
  repeat_times (grpo 8, Trinity's example value; rloo 4), advantage/policy/KL fns and their args.
  A group algorithm with ``repeat_times`` written as 1 -> error (a group of one has no baseline;
  GRPO would train on raw rewards, Trinity's silent failure).
- ``synchronizer.sync_method`` unset -> nccl in ``both``, memory in ``colocate``, checkpoint
  otherwise. ``nccl`` written for another mode is read as that mode's method with a warning
  (Trinity-RFT's validator does the same; nccl is its default); ``memory`` works in ``both``
  (through the Ray object store, as Trinity's Tinker example sets it) and ``colocate``, and is
  an error in the other modes. Mode ``both`` on a cluster of one GPU runs as ``colocate`` with
  memory sync, with a warning line (``rft_core.config.gpu_fit.adapt_one_gpu`` says why).
- Lengths: any two of ``max_model_len``, ``max_prompt_tokens``, ``max_response_tokens``
  determine the third; only ``max_model_len`` -> split in halves; only one of prompt/response ->
  the other is 1024; none -> 1024 + 1024 = 2048.
- ``explorer.rollout_model.engine_type: auto`` -> vllm for an engine over several GPUs
  (``tensor_parallel_size > 1``, ``cluster.gpu_per_node > 0``) when vLLM is installed, else hf
  (measured faster on one GPU: ``resources.auto_engine_type``). Decided from the config, not
  from the machine that loads it, so a CPU head node launching a GPU job decides the same way.
- With ``stages``, each stage is validated as a full config; the global sections only serve
  as what stages inherit. ``validate`` does it once, at load, and keeps the stages;
  ``resolve_stages`` hands out copies of them, so the name check and the launcher of a run
  read the stages the load validated instead of validating again.
- What a config sets that is not implemented is recorded by the validator (``_unimplemented``
  beside ``_written``, the config as written) and logged once at load; each actor repeats the
  recorded list in its own log (``rft_core.actor_setup``) without scanning the config again.
- Trinity-RFT keys we accept without implementing them log a warning when set; deprecated
  spellings are mapped onto their current keys (``rft_core.config.trinity_compat``), and the
  verl keys of ``trainer.trainer_config`` onto our settings (``rft_core.config.trainer_config``).
"""

from __future__ import annotations

import copy
import logging
from contextlib import nullcontext

from rft_core.config.gpu_fit import adapt_one_gpu
from rft_core.config.presets import get_preset, ignored_kl_penalty
from rft_core.config.problems import at_least, collecting, is_collecting, refuse, report
from rft_core.config.resources import check_cluster, check_world_size
from rft_core.config.rollout_schema import AuxiliaryModelConfig
from rft_core.config.schema import Config, StageConfig
from rft_core.config.stages import (
    check_stage_list,
    in_stage,
    inherits_eval_tasksets,
    stage_config,
)
from rft_core.config.trainer_config import apply_trainer_config
from rft_core.config.trinity_compat import (
    apply_deprecated,
    fold_rollout_model_overrides,
    unimplemented_settings,
    warn_unimplemented,
)
from rft_core.config.validate_buffer import check_sampling, derive_buffer
from rft_core.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_HALF_LEN = 1024


def validate(cfg: Config) -> Config:
    """Check ``cfg`` and fill its derived values in place; returns it. A config with stages has
    every stage validated and kept for :func:`resolve_stages`."""
    if "_written" not in cfg.__dict__:
        cfg._written = copy.deepcopy(cfg)
        warn_unimplemented(cfg._written)
    if cfg.stages:
        check_stage_list(cfg)
        cfg._stages = [validate_stage(cfg, i) for i in range(len(cfg.stages))]
        return cfg
    _derive(cfg)
    return cfg


def resolve_stages(cfg: Config) -> list[Config]:
    """A validated full Config per stage, in order; ``[cfg]`` when the config has no stages.
    The stages :func:`validate` kept are handed out as copies (a run sets a later stage's
    model path on its own); a config whose stages it never saw has them validated here."""
    if not cfg.stages:
        return [cfg]
    if "_stages" in cfg.__dict__:
        return copy.deepcopy(cfg._stages)
    return [validate_stage(cfg, i) for i in range(len(cfg.stages))]


def validate_stage(cfg: Config, index: int) -> Config:
    """The validated full Config of stage ``index`` (see ``rft_core.config.stages``)."""
    stage = cfg.stages[index]
    out = stage_config(cfg, stage)
    if index < len(cfg.stages) - 1 and out.trainer.save_hf_checkpoint == "never":
        # the next stage starts from this stage's huggingface weights
        log.warning(
            "stage %r: trainer.save_hf_checkpoint never -> last (the next stage needs it)",
            stage.stage_name,
        )
        out.trainer.save_hf_checkpoint = "last"
    if stage.synchronizer is None and stage.mode is not None and stage.mode != cfg.mode:
        # the global sync_method was written for the global mode; the stage's mode decides its own
        out.synchronizer.sync_method = None
    out._written = copy.deepcopy(out)
    with collecting() if is_collecting() else nullcontext(None) as found:
        try:
            _derive_stage(out, stage, index)
        except ConfigError as err:
            if found is None:
                raise in_stage(err, stage, index) from err
            err.cross_field = True  # a rule that had to stop; the next stage still runs
            found.append(err)
    for err in found or []:
        report(in_stage(err, stage, index))
    return out


def _derive_stage(out: Config, stage: StageConfig, index: int) -> None:
    _derive(out)
    if stage.buffer is not None:  # data errors name the stage's own section
        ei = out.buffer.explorer_input
        own_evals = [] if inherits_eval_tasksets(out, stage) else ei.eval_tasksets
        for section in [
            *ei.all_tasksets,
            *own_evals,
            out.buffer.trainer_input.experience_buffer,
        ]:
            if getattr(section, "_yaml_path", None):
                section._yaml_path = f"stages[{index}].{section._yaml_path}"


# ---------------------------------------------------------------- one full config


def _derive(cfg: Config) -> None:
    cfg._stand_ins = set()  # YAML paths holding a stand-in for a value that was refused
    apply_deprecated(cfg)
    apply_trainer_config(cfg, getattr(cfg, "_written", cfg))
    fold_rollout_model_overrides(cfg)
    _check_top(cfg)
    check_sampling(cfg.model, "model")
    _derive_lengths(cfg)
    _derive_algorithm(cfg)
    derive_buffer(cfg)
    _check_explorer(cfg)
    at_least(cfg.cluster.node_num, "cluster.node_num", 1)
    at_least(cfg.cluster.gpu_per_node, "cluster.gpu_per_node", 0)
    at_least(cfg.monitor.rollout_samples_per_step, "monitor.rollout_samples_per_step", 0)
    at_least(cfg.monitor.rollout_samples_interval, "monitor.rollout_samples_interval", 1)
    at_least(cfg.log.progress_steps, "log.progress_steps", 1)
    at_least(cfg.log.progress_seconds, "log.progress_seconds", 1)
    adapt_one_gpu(cfg)  # mode both on one GPU runs colocated, with one warning line
    check_cluster(cfg)
    _derive_synchronizer(cfg)
    _derive_trainer(cfg)
    cfg._unimplemented = unimplemented_settings(cfg)  # what each actor's log repeats


def _check_top(cfg: Config) -> None:
    for key in ("project", "name", "checkpoint_root_dir"):
        if not str(getattr(cfg, key)).strip():
            refuse(
                ConfigError(
                    key,
                    "must not be empty (the job dir is <checkpoint_root_dir>/<project>/<name>)",
                )
            )
    if not cfg.model.model_path.strip():
        refuse(
            ConfigError(
                "model.model_path",
                "required: a Hugging Face model directory (e.g. made by `trinity init-demo`) or a model name in the offline cache",
            )
        )


def _derive_lengths(cfg: Config) -> None:
    """The three lengths from the ones written (module docstring). A split that leaves no room
    is reported and 1 stands in for the missing length (named in ``cfg._stand_ins``, so that a
    rule comparing with it, a taskset's ``max_tokens``, says nothing rather than nonsense)."""
    m = cfg.model
    for key in ("max_model_len", "max_prompt_tokens", "max_response_tokens"):
        at_least(getattr(m, key), f"model.{key}", 1)
    total, prompt, response = m.max_model_len, m.max_prompt_tokens, m.max_response_tokens
    if total is not None and prompt is not None and response is not None:
        if prompt + response > total:
            refuse(
                ConfigError(
                    "model.max_model_len",
                    f"max_prompt_tokens {prompt} + max_response_tokens {response} = {prompt + response} "
                    f"exceeds max_model_len {total}; raise max_model_len or lower one of the two",
                    value=total,
                )
            )
        return
    if total is not None and response is not None:
        prompt = total - response
        if prompt < 1:
            refuse(
                ConfigError(
                    "model.max_response_tokens",
                    f"{response} leaves no room for a prompt in max_model_len {total}; lower it below {total}",
                    value=response,
                )
            )
            prompt = 1
            cfg._stand_ins.add("model.max_prompt_tokens")
    elif total is not None and prompt is not None:
        response = total - prompt
        if response < 1:
            refuse(
                ConfigError(
                    "model.max_prompt_tokens",
                    f"{prompt} leaves no room for a response in max_model_len {total}; lower it below {total}",
                    value=prompt,
                )
            )
            response = 1
            cfg._stand_ins.add("model.max_response_tokens")
    elif total is not None:
        response = total // 2
        prompt = total - response
        if response < 1:
            refuse(
                ConfigError(
                    "model.max_model_len",
                    f"{total} is too small for a prompt and a response",
                    value=total,
                )
            )
            response = 1
            cfg._stand_ins.add("model.max_response_tokens")
    else:
        prompt = DEFAULT_HALF_LEN if prompt is None else prompt
        response = DEFAULT_HALF_LEN if response is None else response
        total = prompt + response
    m.max_model_len, m.max_prompt_tokens, m.max_response_tokens = total, prompt, response


def _derive_algorithm(cfg: Config) -> None:
    """Fill unset ``algorithm.*`` from the preset of ``algorithm_type`` (rft_core.config.presets)."""
    a = cfg.algorithm
    p = get_preset(a.algorithm_type)
    if a.repeat_times is None:
        a.repeat_times = p.repeat_times
    if not at_least(a.repeat_times, "algorithm.repeat_times", 1):
        a.repeat_times = p.repeat_times  # reported; the preset's stands in for the checks below
    if p.group_algorithm and a.repeat_times < 2:
        refuse(
            ConfigError(
                "algorithm.repeat_times",
                f"{a.algorithm_type} compares the rollouts of one task, so it needs a group of at least 2 "
                f"(got {a.repeat_times}); set repeat_times to e.g. {p.repeat_times}",
                value=a.repeat_times,
            )
        )
        a.repeat_times = p.repeat_times  # stands in for the rules below
    if a.advantage_fn is None or a.advantage_fn == p.advantage_fn:
        a.advantage_fn = p.advantage_fn
        a.advantage_fn_args = {**p.advantage_fn_args, **a.advantage_fn_args}
    if a.policy_loss_fn is None or a.policy_loss_fn == p.policy_loss_fn:
        a.policy_loss_fn = p.policy_loss_fn
        a.policy_loss_fn_args = {**p.policy_loss_fn_args, **a.policy_loss_fn_args}
    a.kl_loss_fn = a.kl_loss_fn or p.kl_loss_fn
    if a.kl_loss_fn != "none":
        a.kl_loss_fn_args.setdefault("kl_coef", p.kl_coef or 0.001)
    a.kl_penalty_fn = a.kl_penalty_fn or p.kl_penalty_fn
    if a.kl_penalty_fn != "none":
        a.kl_penalty_fn_args.setdefault("kl_coef", p.kl_penalty_coef or 0.001)
    if warning := ignored_kl_penalty(a.algorithm_type, a.kl_penalty_fn):
        log.warning(warning)
    a.entropy_loss_fn = a.entropy_loss_fn or "default"
    a.entropy_loss_fn_args.setdefault("entropy_coef", p.entropy_coef)
    a.loss_agg_mode = a.loss_agg_mode or p.loss_agg_mode
    o = a.optimizer
    if o.lr <= 0:
        report(ConfigError("algorithm.optimizer.lr", f"must be > 0, got {o.lr}", value=o.lr))
    if len(o.betas) != 2 or not all(0.0 <= b < 1.0 for b in o.betas):
        report(
            ConfigError(
                "algorithm.optimizer.betas",
                f"must be two numbers in [0, 1), e.g. [0.9, 0.999]; got {o.betas}",
                value=o.betas,
            )
        )
    for key in ("lr_warmup_steps_ratio", "min_lr_ratio"):
        value = getattr(o, key)
        if not 0.0 <= value <= 1.0:
            report(
                ConfigError(
                    f"algorithm.optimizer.{key}", f"must be in [0, 1], got {value}", value=value
                )
            )
    if o.weight_decay < 0:
        report(
            ConfigError(
                "algorithm.optimizer.weight_decay",
                f"must be >= 0, got {o.weight_decay}",
                value=o.weight_decay,
            )
        )
    if cfg.trainer.grad_clip is not None:
        o.clip_grad = cfg.trainer.grad_clip
    if o.clip_grad <= 0:
        path = (
            "trainer.grad_clip"
            if cfg.trainer.grad_clip is not None
            else "algorithm.optimizer.clip_grad"
        )
        refuse(ConfigError(path, f"must be > 0, got {o.clip_grad}", value=o.clip_grad))
    cfg.trainer.grad_clip = o.clip_grad


def _check_explorer(cfg: Config) -> None:
    e, rm = cfg.explorer, cfg.explorer.rollout_model
    at_least(e.eval_interval, "explorer.eval_interval", 1)
    at_least(e.runner_per_model, "explorer.runner_per_model", 1)
    at_least(e.max_timeout, "explorer.max_timeout", 1)
    at_least(e.max_retry_times, "explorer.max_retry_times", 0)
    at_least(rm.engine_num, "explorer.rollout_model.engine_num", 1)
    at_least(rm.tensor_parallel_size, "explorer.rollout_model.tensor_parallel_size", 1)
    if not 0.0 < rm.gpu_memory_utilization <= 1.0:
        report(
            ConfigError(
                "explorer.rollout_model.gpu_memory_utilization",
                f"must be in (0, 1], got {rm.gpu_memory_utilization}",
                value=rm.gpu_memory_utilization,
            )
        )
    for i, aux in enumerate(e.auxiliary_models):
        _check_auxiliary_model(aux, f"explorer.auxiliary_models[{i}]")


def _check_auxiliary_model(aux: AuxiliaryModelConfig, path: str) -> None:
    """One engine per auxiliary model, on the policy engine's device (see rft_core.explorer.explorer)."""
    if not (aux.model_path or "").strip():
        refuse(
            ConfigError(
                f"{path}.model_path",
                "required: the judge/reward model to load (HF repo id or local directory)",
            )
        )
    if aux.engine_num != 1:
        refuse(
            ConfigError(
                f"{path}.engine_num",
                f"RFT Studio runs one engine per auxiliary model; set 1 (got {aux.engine_num}) or "
                "list the model again for a second engine",
                value=aux.engine_num,
                allowed=[1],
            )
        )
    at_least(aux.tensor_parallel_size, f"{path}.tensor_parallel_size", 1)
    for key in ("max_model_len", "max_prompt_tokens", "max_response_tokens"):
        if getattr(aux, key) is not None:
            at_least(getattr(aux, key), f"{path}.{key}", 1)


_SYNC_FOR_MODE = {"both": "nccl", "colocate": "memory"}
# sync methods that work in one mode only, and why
_SYNC_NEEDS_MODE = {
    "nccl": ("both", "nccl broadcasts between a running explorer and trainer"),
    "memory": (
        "both or colocate",
        "memory sync hands the trainer's weights to a running explorer (through the Ray object "
        "store, or in one process)",
    ),
}


def _derive_synchronizer(cfg: Config) -> None:
    s = cfg.synchronizer
    usual = _SYNC_FOR_MODE.get(cfg.mode, "checkpoint")
    if s.sync_method is None:
        s.sync_method = usual
    elif s.sync_method == "nccl" and cfg.mode != "both":
        # Trinity-RFT's default is nccl; its validator reads it as the mode's method, loudly
        log.warning(
            "synchronizer.sync_method nccl broadcasts between a running explorer and trainer "
            "(mode both): read as %s in mode %s, as Trinity-RFT does",
            usual,
            cfg.mode,
        )
        s.sync_method = usual
    if s.sync_method in _SYNC_NEEDS_MODE and cfg.mode not in _SYNC_NEEDS_MODE[s.sync_method][
        0
    ].split(" or "):
        needed, why = _SYNC_NEEDS_MODE[s.sync_method]
        refuse(
            ConfigError(
                "synchronizer.sync_method",
                f"{why} (mode {needed}); mode {cfg.mode} uses {usual}",
                value=s.sync_method,
                allowed=sorted({usual, "checkpoint"}),
            )
        )
    at_least(s.sync_interval, "synchronizer.sync_interval", 1)
    at_least(s.sync_offset, "synchronizer.sync_offset", 0)
    at_least(s.sync_timeout, "synchronizer.sync_timeout", 1)


BUDGET_BELOW_LENGTH = (
    "trainer.%s %d is below model.max_model_len %d: a longer sequence trains alone in its "
    "micro-batch (trainer.batching.micro_batches); raise it to keep every one within the budget"
)


def _derive_trainer(cfg: Config) -> None:
    t = cfg.trainer
    at_least(t.save_interval, "trainer.save_interval", 0)
    at_least(t.max_checkpoints_to_keep, "trainer.max_checkpoints_to_keep", 0)
    at_least(t.sft_eval_interval, "trainer.sft_eval_interval", 0)
    at_least(t.total_steps, "trainer.total_steps", 1)
    at_least(t.micro_batch_size_per_gpu, "trainer.micro_batch_size_per_gpu", 1)
    at_least(t.world_size, "trainer.world_size", 1)
    check_world_size(cfg)
    if t.max_token_len_per_gpu is None:
        t.max_token_len_per_gpu = 2 * cfg.model.max_model_len
    written = getattr(cfg, "_written", cfg).trainer
    old = written.ppo_max_token_len_per_gpu
    key = "ppo_max_token_len_per_gpu" if old and old == t.max_token_len_per_gpu else None
    key = key or "max_token_len_per_gpu"
    at_least(t.max_token_len_per_gpu, f"trainer.{key}", 1)
    if t.max_token_len_per_gpu < cfg.model.max_model_len:  # verl checks real lengths, too
        log.warning(BUDGET_BELOW_LENGTH, key, t.max_token_len_per_gpu, cfg.model.max_model_len)
