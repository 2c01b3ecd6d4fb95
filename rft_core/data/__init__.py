"""Tasksets and training datasets: finding the files, reading rows, turning them into Tasks,
and reading them batch by batch over epochs with resumable offsets."""

from rft_core.data.reader import TasksetReader
from rft_core.data.sft import load_sft_dataset
from rft_core.data.source import find_files, read_rows
from rft_core.data.task import Task
from rft_core.data.taskset import Taskset, TasksetChain, load_taskset, load_training_tasksets

__all__ = [
    "Task",
    "Taskset",
    "TasksetChain",
    "TasksetReader",
    "find_files",
    "load_sft_dataset",
    "load_taskset",
    "load_training_tasksets",
    "read_rows",
]
