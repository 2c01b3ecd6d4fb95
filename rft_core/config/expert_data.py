"""Expert SFT data mixed into RL steps (``algorithm_type: mix`` / ``mix_chord``), as Trinity-RFT's
``mix`` sample strategy configures it:

- ``algorithm.sample_strategy_args.expert_data_ratio`` (default 0.5): each trainer step reads
  ``ceil(ratio x buffer.train_batch_size)`` expert rows and the rest from the experience buffer;
- ``algorithm.sample_strategy_args.sft_dataset_name`` (default ``sft_dataset``): the key of
  ``buffer.trainer_input.auxiliary_buffers`` holding the expert dataset, an SFT file read like
  an ``experience_buffer`` in train mode (``path``, ``split``, ``format.messages_key`` ...) plus
  Trinity's ``total_epochs`` / ``total_steps`` over it: the run ends when it is used up.

Everything else in ``auxiliary_buffers`` and ``sample_strategy_args`` has no effect and is named
by :func:`unused_mix_settings` (the validator adds it to the unimplemented-settings warnings).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from rft_core.config.buffer_schema import ExperienceBufferConfig
from rft_core.config.presets import MIX_SAMPLE_STRATEGY_ARGS, mixes_expert_data
from rft_core.config.problems import refuse
from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config

AUX_PATH = "buffer.trainer_input.auxiliary_buffers"
ARGS_PATH = "algorithm.sample_strategy_args"
# Trinity's storage keys of an expert dataset that we read besides ExperienceBufferConfig's
_PASSES = ("total_epochs", "total_steps")


def strategy_args(cfg: Config) -> dict[str, Any]:
    """``sample_strategy_args`` over Trinity's mix defaults."""
    return {**MIX_SAMPLE_STRATEGY_ARGS, **dict(cfg.algorithm.sample_strategy_args or {})}


def expert_rows_per_step(cfg: Config) -> int:
    """Expert rows in each trainer step: ``ceil(expert_data_ratio x train_batch_size)``."""
    ratio = float(strategy_args(cfg)["expert_data_ratio"])
    return math.ceil(ratio * cfg.buffer.train_batch_size)


def expert_buffer_config(cfg: Config) -> tuple[ExperienceBufferConfig, dict[str, int | None]]:
    """The expert dataset's buffer config (``_yaml_path`` set) and its passes
    ``{"total_epochs", "total_steps"}`` (Trinity's storage defaults: 1 epoch, no step limit)."""
    name = str(strategy_args(cfg)["sft_dataset_name"])
    aux = cfg.buffer.trainer_input.auxiliary_buffers or {}
    path = f"{AUX_PATH}.{name}"
    if name not in aux:
        raise ConfigError(
            path,
            f"required with algorithm_type {cfg.algorithm.algorithm_type}: the expert SFT "
            "dataset (name, storage_type file, path, format.messages_key or prompt_key/"
            f"response_key); {ARGS_PATH}.sft_dataset_name names the key",
        )
    given = OmegaConf.to_container(OmegaConf.create(dict(aux[name])), resolve=True)
    known = {f.name for f in dataclasses.fields(ExperienceBufferConfig)}
    fields = {k: v for k, v in given.items() if k in known}
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ExperienceBufferConfig), fields)
    except Exception as err:  # OmegaConf's validation error: name the place
        raise ConfigError(path, f"not a buffer config: {err}") from err
    eb: ExperienceBufferConfig = OmegaConf.to_object(merged)
    eb.storage_type = eb.storage_type or "file"
    eb._yaml_path = path
    passes = {"total_epochs": given.get("total_epochs", 1), "total_steps": given.get("total_steps")}
    return eb, passes


def check_expert_data(cfg: Config) -> bool:
    """The validator's checks of a mix config (see the module docstring), each reported. False
    when the expert rows per step cannot be counted (a bad ``expert_data_ratio`` stops the
    checks there; a missing or unreadable expert dataset stops its own checks)."""
    args = strategy_args(cfg)
    ratio = args["expert_data_ratio"]
    if not isinstance(ratio, (int, float)) or not 0.0 <= ratio < 1.0:
        refuse(
            ConfigError(
                f"{ARGS_PATH}.expert_data_ratio",
                f"must be a number in [0, 1), got {ratio!r}",
                value=ratio,
            )
        )
        return False
    try:
        eb, passes = expert_buffer_config(cfg)
    except ConfigError as err:
        refuse(err)
        return False
    if eb.storage_type != "file" or not (eb.path or "").strip():
        refuse(
            ConfigError(
                f"{eb._yaml_path}.path"
                if eb.storage_type == "file"
                else f"{eb._yaml_path}.storage_type",
                "the expert data is an SFT dataset: storage_type file and a path to a "
                ".jsonl/.parquet file or dataset directory",
                value=eb.path if eb.storage_type == "file" else eb.storage_type,
            )
        )
    for key, value in passes.items():
        if value is not None and (not isinstance(value, int) or value < 1):
            refuse(
                ConfigError(f"{eb._yaml_path}.{key}", f"must be >= 1, got {value!r}", value=value)
            )
    if cfg.buffer.train_batch_size - expert_rows_per_step(cfg) < 1:
        refuse(
            ConfigError(
                "buffer.train_batch_size",
                f"{cfg.buffer.train_batch_size} leaves no rollout rows next to "
                f"ceil({ratio} x {cfg.buffer.train_batch_size}) expert rows; raise it",
                value=cfg.buffer.train_batch_size,
            )
        )
    return True


def unused_mix_settings(cfg: Config) -> list[tuple[str, Any]]:
    """``(yaml path, value)`` of the ``auxiliary_buffers`` and ``sample_strategy_args`` that the
    run does not read: all of them unless the algorithm mixes expert data, else every key but
    the ones of the module docstring."""
    aux = dict(cfg.buffer.trainer_input.auxiliary_buffers or {})
    args = dict(cfg.algorithm.sample_strategy_args or {})
    if not mixes_expert_data(cfg.algorithm.algorithm_type):
        found = [(f"{AUX_PATH}.{k}", _plain(v)) for k, v in aux.items()]
        return found + [(f"{ARGS_PATH}.{k}", _plain(v)) for k, v in args.items()]
    name = str({**MIX_SAMPLE_STRATEGY_ARGS, **args}["sft_dataset_name"])
    found = [
        (f"{ARGS_PATH}.{k}", _plain(v))
        for k, v in args.items()
        if k not in MIX_SAMPLE_STRATEGY_ARGS
    ]
    found += [(f"{AUX_PATH}.{k}", _plain(v)) for k, v in aux.items() if k != name]
    known = {f.name for f in dataclasses.fields(ExperienceBufferConfig)} | set(_PASSES)
    expert = aux.get(name) or {}
    found += [
        (f"{AUX_PATH}.{name}.{k}", _plain(v)) for k, v in dict(expert).items() if k not in known
    ]
    return found


def _plain(value: Any) -> Any:
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value)
    return value
