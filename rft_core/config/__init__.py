"""The config of a run: Trinity-RFT's YAML sections as typed dataclasses.

cfg = load_config("examples/grpo_gsm8k/gsm8k.yaml", ["buffer.batch_size=8"])
for stage_cfg in resolve_stages(cfg):
    stage_cfg.job_dir  # <checkpoint_root_dir>/<project>/<name>[/<stage_name>]
"""

from rft_core.config.load import config_to_dict, config_to_yaml, load_config, load_config_from_dict
from rft_core.config.registered import check_registered_names
from rft_core.config.schema import (
    AlgorithmConfig,
    AuxiliaryModelConfig,
    BufferConfig,
    ClusterConfig,
    Config,
    DataSelectorConfig,
    ExperienceBufferConfig,
    ExplorerConfig,
    ExplorerInput,
    FormatConfig,
    GenerationConfig,
    ModelConfig,
    MonitorConfig,
    OptimizerConfig,
    RolloutModelConfig,
    StageConfig,
    SynchronizerConfig,
    TasksetConfig,
    TrainerConfig,
    TrainerInput,
    job_dir,
)
from rft_core.config.validate import resolve_stages, validate

__all__ = [
    "AlgorithmConfig",
    "AuxiliaryModelConfig",
    "BufferConfig",
    "ClusterConfig",
    "Config",
    "DataSelectorConfig",
    "ExperienceBufferConfig",
    "ExplorerConfig",
    "ExplorerInput",
    "FormatConfig",
    "GenerationConfig",
    "ModelConfig",
    "MonitorConfig",
    "OptimizerConfig",
    "RolloutModelConfig",
    "StageConfig",
    "SynchronizerConfig",
    "TasksetConfig",
    "TrainerConfig",
    "TrainerInput",
    "check_registered_names",
    "config_to_dict",
    "config_to_yaml",
    "job_dir",
    "json_schema",
    "load_config",
    "load_config_from_dict",
    "resolve_stages",
    "validate",
]


def json_schema() -> dict:
    """JSON schema of the whole config tree (see ``rft_core.config.json_schema``)."""
    # on call: the module rft_core.config.json_schema shares this function's name
    from rft_core.config.json_schema import json_schema as _json_schema

    return _json_schema()
