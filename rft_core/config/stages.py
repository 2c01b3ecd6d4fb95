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

from rft_core.config.schema import Config, StageConfig

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
