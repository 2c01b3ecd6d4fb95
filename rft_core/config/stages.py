"""Stages: ``stages: [{stage_name: sft_warmup, mode: train, ...}, {stage_name: rft}]``.

Each stage is a full Config: the global config with every section that the stage gives
*replacing* the global one (Trinity's rule: a stage's ``buffer`` is the whole buffer of that
stage, not a patch), ``name`` kept and ``stage_name`` set, so its job dir is
``<root>/<project>/<name>/<stage_name>``. Derived values are computed per stage from what the
user wrote, never carried over from the global config: ``rft_core.config.validate`` validates
each stage this module builds (``resolve_stages`` is there).
"""

from __future__ import annotations

import copy
import dataclasses
import logging

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
    return out


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
    path = f"stages[{index}].{err.path}" if given else err.path
    note = "" if given else f" (inherited by stage {stage.stage_name!r})"
    out = ConfigError(path, err.message + note, value=err.value, allowed=err.allowed)
    out.cross_field = err.cross_field
    if not given:  # the same problem in the next stage is merged into this one (``report``)
        out.problem, out.inherited_by = err.message, [stage.stage_name]
    return out
