"""The datasets one stage of a run reads, read once, before any actor starts.

``read_run_datasets(cfg)`` reads what the stage's explorer rolls out and evaluates on (its
tasksets; the eval ones also for an SFT/DPO trainer that evaluates, ``trainer.held_out_eval``) and, for an algorithm without rollouts, the SFT/DPO dataset its trainer reads in their
place (mix, mix_chord: the expert SFT dataset is checked too), and returns them with every problem found (each message names its YAML path, so the
launcher's preflight reports them all in one error). The launcher hands the result to the
actors (``Explorer(tasksets=...)``, ``Trainer(dataset_rows=...)``), so no dataset is read twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from rft_core.config import Config
from rft_core.config.expert_data import expert_buffer_config
from rft_core.config.presets import get_preset, mixes_expert_data
from rft_core.config.stages import evaluates_in_trainer
from rft_core.data.sft import check_sft_dataset
from rft_core.data.source import DatasetConfig, Rows, missing_dataset
from rft_core.data.taskset import ExplorerTasksets, read_explorer_tasksets
from rft_core.errors import RFTError

# modes whose explorer reads tasksets (bench evaluates on the eval ones)
EXPLORING_MODES = ("both", "explore", "colocate", "bench")


@dataclass
class RunDatasets:
    """What one stage's actors read, as read before they start."""

    tasksets: ExplorerTasksets | None = None  # the explorer's; None: read none here
    dataset_rows: Rows | None = None  # the trainer's SFT/DPO file, checked for its columns


def read_run_datasets(
    cfg: Config, missing: list[str] | None = None
) -> tuple[RunDatasets, list[str]]:
    """The datasets of stage ``cfg`` and the problems found reading them (none: all read).
    With ``missing`` (``trinity run --dry-run``), a dataset that is not on this machine (it may
    be where the run starts) is skipped with a note there; every other check runs."""
    out = RunDatasets()
    problems: list[str] = []
    preset = get_preset(cfg.algorithm.algorithm_type)
    if cfg.mode in EXPLORING_MODES and preset.use_rollout or evaluates_in_trainer(cfg):
        out.tasksets = read_explorer_tasksets(cfg.buffer.explorer_input, problems, missing)
    eb = cfg.buffer.trainer_input.experience_buffer
    if not preset.use_rollout and eb is not None and eb.storage_type == "file" and eb.path:
        if not _noted_missing(eb, "buffer.trainer_input.experience_buffer", missing):
            try:  # the file and the columns its format names, before the trainer reads it
                out.dataset_rows = check_sft_dataset(eb, schema=preset.schema)
            except RFTError as err:
                problems.append(str(err))
    if mixes_expert_data(cfg.algorithm.algorithm_type) and cfg.mode != "explore":
        expert = expert_buffer_config(cfg)[0]
        if not _noted_missing(expert, "the expert SFT dataset", missing):
            try:  # mix, mix_chord: the expert SFT file (the trainer reads it at its start)
                check_sft_dataset(expert, schema="sft")
            except RFTError as err:
                problems.append(str(err))
    return out, problems


def _noted_missing(cfg: DatasetConfig, where: str, missing: list[str] | None) -> bool:
    if missing is None:
        return False
    absent = missing_dataset(cfg)
    if absent is not None:
        missing.append(f"{getattr(cfg, '_yaml_path', None) or where}.path: {absent}")
    return absent is not None
