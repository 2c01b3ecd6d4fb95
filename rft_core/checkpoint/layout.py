"""The on-disk tree of a job (the seed's layout), without torch: its names, its readers and
its torch-free writers. The dashboard's web process, ``trinity convert``, the launcher, the
explorer, the trainer and the synchronizer all find checkpoints and read or write the tree's
small files through here.

    <checkpoint_root_dir>/<project>/<name>[/<stage_name>]/      a (stage's) job dir
      buffer/  log/  monitor/
      global_step_<N>/
        .full_checkpoint                 a full checkpoint (weight-sync dirs lack it)
        actor/ huggingface/              config.json, tokenizer files, model.safetensors (+ index)
      explorer_meta.json  trainer_meta.json  stage_meta.json  run_meta.json  config.yaml
      latest_checkpointed_iteration.txt  latest_state_dict_iteration.txt

The tree's renames into place are here (but for the Hugging Face writer's, which moves its
weight files in with the completion marker last): small files (``latest_*``, the meta JSON
files, a converted ``config.json``) through :func:`write_text_atomic` (a hidden temporary file
beside the target, then a rename: a reader sees the old content or the new, never a partial
file), step dirs through :func:`move_dir_into_place`. Pruning deletes whole step dirs. The rank
files and the Hugging Face weights need torch and are written by
:mod:`rft_core.checkpoint.store` and :mod:`rft_core.checkpoint.formats.hf_safetensors`, which
take their names from here so reader and writer agree on one spelling. Nothing here imports
torch, transformers or Django (tested in a fresh interpreter).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft_core.errors import ConvertError

STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
FULL_CHECKPOINT_MARKER = ".full_checkpoint"
LATEST_CHECKPOINTED = "latest_checkpointed_iteration.txt"
LATEST_STATE_DICT = "latest_state_dict_iteration.txt"
EXPLORER_META = "explorer_meta.json"
TRAINER_META = "trainer_meta.json"
STAGE_META = "stage_meta.json"  # a finished stage of a multi-stage run (the launcher's)
RUN_META = "run_meta.json"  # the name a renamed run was given (the launcher's)
RUN_CONFIG = "config.yaml"  # the run's config as it resolved (trinity run writes it)
ACTOR_DIR = "actor"
FSDP_CONFIG = "fsdp_config.json"
HF_DIR = "huggingface"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# directories of a job dir that are never a stage's job dir
JOB_DIR_PARTS = ("buffer", "log", "monitor")
# Weight-sync dirs that are not full checkpoints: keep the newest few (a reader may still use one).
SYNC_DIRS_TO_KEEP = 2


def step_dir(job_dir: Path, step: int) -> Path:
    return Path(job_dir) / f"global_step_{step}"


def actor_dir(step_path: Path) -> Path:
    """``global_step_<N>/actor``: the actor's rank files (and its ``huggingface/``)."""
    return Path(step_path) / ACTOR_DIR


def hf_dir(step_path: Path) -> Path:
    """``global_step_<N>/actor/huggingface``: where Hugging Face weights live."""
    return actor_dir(step_path) / HF_DIR


def list_step_dirs(job_dir: Path) -> list[tuple[int, Path]]:
    """``global_step_<N>`` directories directly inside ``job_dir``, sorted by step."""
    job_dir = Path(job_dir)
    if not job_dir.is_dir():
        return []
    found = []
    for entry in os.scandir(job_dir):
        m = STEP_DIR_RE.match(entry.name)
        if m and entry.is_dir():
            found.append((int(m.group(1)), Path(entry.path)))
    return sorted(found)


def read_step_file(path: Path) -> int | None:
    """The step number a ``latest_*_iteration.txt`` holds; None when missing or not a number."""
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def is_full_checkpoint(step_path: Path) -> bool:
    return (Path(step_path) / FULL_CHECKPOINT_MARKER).exists()


def full_checkpoints(job_dir: Path) -> list[tuple[int, Path]]:
    """The ``global_step_<N>`` dirs of ``job_dir`` that are full checkpoints, by step."""
    return [(s, d) for s, d in list_step_dirs(job_dir) if is_full_checkpoint(d)]


def latest_checkpoint_step(job_dir: Path) -> int | None:
    """Step of the last full checkpoint: ``latest_checkpointed_iteration.txt`` when it names
    an existing full checkpoint, else the highest ``global_step_N`` marked full."""
    job_dir = Path(job_dir)
    step = read_step_file(job_dir / LATEST_CHECKPOINTED)
    if step is not None and is_full_checkpoint(step_dir(job_dir, step)):
        return step
    full = full_checkpoints(job_dir)
    return full[-1][0] if full else None


def latest_state_dict_step(job_dir: Path) -> int | None:
    """Step of the newest weights usable for weight sync (full or sync-only)."""
    job_dir = Path(job_dir)
    step = read_step_file(job_dir / LATEST_STATE_DICT)
    if step is not None and step_dir(job_dir, step).is_dir():
        return step
    steps = [s for s, _ in list_step_dirs(job_dir)]
    return steps[-1] if steps else None


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def read_explorer_meta(job_dir: Path) -> dict[str, Any] | None:
    """``explorer_meta.json`` (latest_iteration, taskset_offset, model_version), or None."""
    return _read_json(Path(job_dir) / EXPLORER_META)


def read_trainer_meta(job_dir: Path) -> dict[str, Any] | None:
    """``trainer_meta.json`` (the trainer's step and buffer position), or None."""
    return _read_json(Path(job_dir) / TRAINER_META)


def read_stage_meta(job_dir: Path) -> dict[str, Any] | None:
    """``stage_meta.json`` (stage_name, finished, mode, hf_dir, renamed_from), or None."""
    return _read_json(Path(job_dir) / STAGE_META)


def hf_weights_complete(hf_path: Path) -> bool:
    """True when ``hf_path`` holds finished weights: ``model.safetensors``, or an index whose
    every shard file exists. Reads no tensor data."""
    hf_path = Path(hf_path)
    if (hf_path / SAFETENSORS_FILE).is_file():
        return True
    index = hf_path / SAFETENSORS_INDEX
    if not index.is_file():
        return False
    try:
        files = set(json.loads(index.read_text())["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    return all((hf_path / f).is_file() for f in files)


def hf_model_ready(step_path: Path) -> bool:
    """``actor/huggingface/`` holds a loadable model: config.json and finished weights."""
    hf = hf_dir(step_path)
    return (hf / "config.json").is_file() and hf_weights_complete(hf)


def dir_size(path: Path) -> int:
    """Bytes of the regular files below ``path`` (symlinks not followed); 0 when missing."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:  # removed while walking (a sync dir being pruned)
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def stage_job_dirs(job_dir: Path) -> list[tuple[str, Path]]:
    """``("", job_dir)`` and ``(stage_name, job_dir/stage_name)`` for each stage's job dir
    below it: a subdirectory (not buffer/log/monitor, not hidden, not a step) that holds a
    ``global_step_<N>`` or a ``latest_*`` / ``*_meta.json`` file."""
    job_dir = Path(job_dir)
    out: list[tuple[str, Path]] = [("", job_dir)]
    if not job_dir.is_dir():
        return out
    markers = (LATEST_CHECKPOINTED, LATEST_STATE_DICT, EXPLORER_META, TRAINER_META)
    for entry in sorted(os.scandir(job_dir), key=lambda e: e.name):
        name = entry.name
        if (
            not entry.is_dir()
            or name.startswith(".")
            or name in JOB_DIR_PARTS
            or STEP_DIR_RE.match(name)
        ):
            continue
        path = Path(entry.path)
        if list_step_dirs(path) or any((path / m).exists() for m in markers):
            out.append((name, path))
    return out


@dataclass(frozen=True)
class StepCheckpoint:
    """One ``global_step_<N>`` of a stage's job dir as the tree shows it."""

    stage: str
    step: int
    path: Path
    full: bool  # a full checkpoint (not a weight-sync dir)
    hf_ready: bool  # actor/huggingface holds config.json and finished weights

    @property
    def hf_path(self) -> Path:
        return hf_dir(self.path)

    def size_bytes(self) -> int:
        return dir_size(self.path)


def scan_checkpoints(job_dir: Path) -> list[StepCheckpoint]:
    """Every ``global_step_<N>`` of ``job_dir`` and of each stage's job dir below it, by stage
    then step. Reads directory listings and small files only."""
    return [
        StepCheckpoint(stage, step, path, is_full_checkpoint(path), hf_model_ready(path))
        for stage, stage_dir in stage_job_dirs(job_dir)
        for step, path in list_step_dirs(stage_dir)
    ]


def step_of(path: Path) -> int | None:
    """N of a path named ``global_step_<N>``, else None."""
    m = STEP_DIR_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def find_step_dirs(checkpoint_dir: str | Path) -> list[tuple[int, Path]]:
    """The ``global_step_<N>`` directories that ``checkpoint_dir`` designates, by step: a job
    dir (every step below it, at any depth; hidden dirs and the inside of a found step are not
    searched), one ``global_step_<N>``, or a path inside one (the nearest enclosing
    ``global_step_<digits>`` that has an ``actor/``). The walk does not follow symlinks."""
    path = Path(checkpoint_dir).expanduser().absolute()
    if not path.exists():
        raise ConvertError(f"--checkpoint-dir {checkpoint_dir}: no such directory")
    if not path.is_dir():
        raise ConvertError(f"--checkpoint-dir {checkpoint_dir}: not a directory")
    m = STEP_DIR_RE.match(path.name)
    if m:
        return [(int(m.group(1)), path)]
    for parent in path.parents:
        m = STEP_DIR_RE.match(parent.name)
        if m and (parent / ACTOR_DIR).is_dir():
            return [(int(m.group(1)), parent)]
    found = []
    for root, dirs, _files in os.walk(path):  # followlinks=False: no cycles
        keep = []
        for d in sorted(dirs):
            m = STEP_DIR_RE.match(d)
            if m:
                found.append((int(m.group(1)), Path(root) / d))
            elif not d.startswith("."):
                keep.append(d)
        dirs[:] = keep  # do not descend into steps or hidden (temporary) dirs
    return sorted(found)


# --------------------------------------------------------------------------- writers


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A hidden temporary path beside ``path`` to write; renamed onto ``path`` when the block
    ends without error, so readers never see a partial file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path``'s content with ``text`` atomically (see :func:`replacing`)."""
    with replacing(path) as tmp:
        tmp.write_text(text)


def move_dir_into_place(tmp: Path, final: Path) -> None:
    """Rename the finished directory ``tmp`` onto ``final``. An existing ``final`` is renamed
    aside first and deleted after, so the path names a complete directory or none."""
    tmp, final = Path(tmp), Path(final)
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented, key-sorted JSON, written atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_explorer_meta(job_dir: Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(job_dir) / EXPLORER_META, meta)


def write_trainer_meta(job_dir: Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(job_dir) / TRAINER_META, meta)


def write_stage_meta(job_dir: Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(job_dir) / STAGE_META, meta)


def write_run_meta(job_dir: Path, meta: dict[str, Any]) -> None:
    write_json_atomic(Path(job_dir) / RUN_META, meta)


def mark_latest_checkpoint(job_dir: Path, step: int) -> None:
    """Point both ``latest_*`` files at the full checkpoint of ``step``."""
    write_text_atomic(Path(job_dir) / LATEST_CHECKPOINTED, f"{step}\n")
    mark_latest_state_dict(job_dir, step)


def mark_latest_state_dict(job_dir: Path, step: int) -> None:
    """Point ``latest_state_dict_iteration.txt`` at the weights of ``step``."""
    write_text_atomic(Path(job_dir) / LATEST_STATE_DICT, f"{step}\n")


def prune_sync_dirs(job_dir: Path, keep: int = SYNC_DIRS_TO_KEEP) -> list[int]:
    """Delete the weight-sync dirs (step dirs that are not full checkpoints) but the newest
    ``keep``; full checkpoints are never touched. Returns the steps deleted."""
    job_dir = Path(job_dir)
    sync_only = [s for s, d in list_step_dirs(job_dir) if not is_full_checkpoint(d)]
    removed = sync_only[:-keep] if keep > 0 else sync_only
    for s in removed:
        shutil.rmtree(step_dir(job_dir, s), ignore_errors=True)
    return removed
