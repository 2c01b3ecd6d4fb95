"""Stages: ``stages: [{stage_name: sft_warmup, mode: train, ...}, {stage_name: rft}]``.

Each stage is a full Config: the global config with every section that the stage gives
*replacing* the global one (Trinity's rule: a stage's ``buffer`` is the whole buffer of that
stage, not a patch), ``name`` kept and ``stage_name`` set, so its job dir is
``<root>/<project>/<name>/<stage_name>``. One exception: a stage that trains on a dataset
(mode train, SFT or DPO: no explorer) and lists no ``buffer.explorer_input.eval_tasksets`` of
its own keeps the global ones (with the global ``explorer_input``'s defaults), so a warmup stage's trainer evaluates on the run's held-out
tasksets (``trainer.sft_eval_interval``; 0 turns it off). Derived values are computed per stage from what the
user wrote, never carried over from the global config: ``rft_core.config.validate`` validates
each stage this module builds (``resolve_stages`` is there).
"""

from __future__ import annotations

import copy
import dataclasses
import logging

from rft_core.config.presets import get_preset
from rft_core.config.problems import refuse
from rft_core.config.schema import Config, StageConfig
from rft_core.errors import ConfigError

log = logging.getLogger(__name__)

STAGE_SECTIONS = [f.name for f in dataclasses.fields(StageConfig) if f.name not in ("stage_name",)]


def written(cfg: Config) -> Config:
    """The config as the user wrote it, before derived values were filled in."""
    return getattr(cfg, "_written", None) or cfg


def stage_config(base: Config, stage: StageConfig) -> Config:
    """``base`` with the sections ``stage`` gives replacing the global ones (not yet validated)."""
    out = copy.deepcopy(written(base))
    out.__dict__.pop("_written", None)
    for section in STAGE_SECTIONS:
        value = getattr(stage, section)
        if value is not None:
            setattr(out, section, copy.deepcopy(value))
    out.stage_name = stage.stage_name
    out.stages = []
    if inherits_eval_tasksets(out, stage):
        # with the defaults they are derived by (workflow, reward, system prompt), no training ones
        inherited = copy.deepcopy(written(base).buffer.explorer_input)
        inherited.taskset, inherited.tasksets = None, []
        out.buffer.explorer_input = inherited
    return out


def trains_on_a_dataset(cfg: Config) -> bool:
    """Mode train with an algorithm without rollouts (SFT, DPO): a job with no explorer."""
    try:
        return cfg.mode == "train" and not get_preset(cfg.algorithm.algorithm_type).use_rollout
    except ConfigError:
        return False  # an unknown algorithm: validation reports it


def evaluates_in_trainer(cfg: Config) -> bool:
    """The job's trainer runs the held-out eval: it trains on a dataset, has eval tasksets and
    ``trainer.sft_eval_interval`` is not 0."""
    return (
        trains_on_a_dataset(cfg)
        and bool(cfg.buffer.explorer_input.eval_tasksets)
        and cfg.trainer.sft_eval_interval != 0
    )


def inherits_eval_tasksets(out: Config, stage: StageConfig) -> bool:
    """The stage's own buffer lists no eval tasksets and its job trains on a dataset: it
    evaluates on the global eval tasksets (module docstring)."""
    own = stage.buffer.explorer_input.eval_tasksets if stage.buffer is not None else None
    return stage.buffer is not None and not own and trains_on_a_dataset(out)


def check_stage_list(cfg: Config) -> None:
    """Every stage named, as a directory name, once (each bad name reported; the stage is still
    validated, its name only names a directory)."""
    seen: dict[str, int] = {}
    for i, stage in enumerate(cfg.stages):
        path = f"stages[{i}].stage_name"
        name = stage.stage_name.strip()
        if not name:
            refuse(
                ConfigError(path, "every stage needs a stage_name (it names the stage's job dir)")
            )
            continue
        if "/" in name or name in (".", ".."):
            refuse(
                ConfigError(
                    path,
                    f"{name!r} cannot be a directory name; use letters, digits, _ or -",
                    value=name,
                )
            )
        if name in seen:
            refuse(
                ConfigError(
                    path,
                    f"duplicate stage_name {name!r} (also stages[{seen[name]}]); stage names must be unique",
                    value=name,
                )
            )
            continue
        seen[name] = i


def in_stage(err: ConfigError, stage: StageConfig, index: int) -> ConfigError:
    """``err`` of stage ``index`` at the path where the stage or the global section wrote it."""
    head = err.path.split(".")[0].split("[")[0]
    given = head == "mode" and stage.mode is not None or getattr(stage, head, None) is not None
    if given and err.path.startswith("buffer.explorer_input.eval_tasksets"):
        # a stage's own buffer that lists no eval tasksets evaluates on the global ones
        given = bool(stage.buffer.explorer_input.eval_tasksets)
    path = f"stages[{index}].{err.path}" if given else err.path
    note = "" if given else f" (inherited by stage {stage.stage_name!r})"
    out = ConfigError(path, err.message + note, value=err.value, allowed=err.allowed)
    out.cross_field = err.cross_field
    if not given:  # the same problem in the next stage is merged into this one (``report``)
        out.problem, out.inherited_by = err.message, [stage.stage_name]
    return out
