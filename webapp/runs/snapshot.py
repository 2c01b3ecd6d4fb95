"""The config a run's Ray job reads: the experiment's config as launched, made independent of
where the job runs.

    spec = launch_spec(run.config, cfg, run.pk, area)   # cfg: the loaded, validated Config
    spec.config        # the mapping written to spec.config_path
    spec.job_dir       # <root>/run-<pk>/<project>[/<group>]/<name>

* ``checkpoint_root_dir`` becomes ``<root>/run-<pk>``, ``<root>`` being the config's
  ``checkpoint_root_dir`` (relative: under ``area``, the runs area of the run's owner,
  ``<RFT_RUNS_DIR>/users/<user id>``; whether the owner may write there is
  ``webapp.runs.claims``' rule, checked at launch): two runs never share a job dir or a
  checkpoint tree.
* Model, chat template and taskset paths are written resolved (``${oc.env:...}`` as the worker
  sees it, which is what ``check_config`` allowed) and absolute (relative: against
  ``settings.RFT_WORK_DIR``, where ``trinity run`` would have been started), so the job's
  working directory does not matter.
* An experience buffer's relative path is a queue or database mirror that rft_core keeps under
  ``<job_dir>/buffer/`` (left as it is), unless it names a file that exists under the work
  dir (an SFT/DPO dataset read from there), which is made absolute.

Everything else stays as the user wrote it: the snapshot is their config, not a dump of every
default (a dump would freeze values the validator derives per stage).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from rft_core.config import Config
from rft_core.config.stages import written

CONFIG_FILE = "config.yaml"
# keys whose string values are filesystem paths
_PATH_KEYS = {"model_path", "critic_model_path", "chat_template_path", "path"}
_URL_PREFIXES = ("sqlite:", "http://", "https://", "s3://", "gs://", "hdfs://")


@dataclass(frozen=True)
class LaunchSpec:
    config: dict[str, Any]
    run_root: Path  # <root>/run-<pk>: the snapshot file and the job dir live under it
    job_dir: Path

    @property
    def config_path(self) -> Path:
        return self.run_root / CONFIG_FILE

    def yaml(self) -> str:
        return yaml.safe_dump(self.config, sort_keys=False, allow_unicode=True, width=100)

    def write(self) -> Path:
        self.run_root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.yaml(), encoding="utf-8")
        return self.config_path


def checkpoint_root(checkpoint_root_dir: str, area: Path) -> Path:
    """Where a config's ``checkpoint_root_dir`` is (real path): a relative one under ``area``,
    the runs area of the run's owner (``webapp.runs.claims.runs_area``)."""
    root = Path(os.path.expanduser(checkpoint_root_dir or "./checkpoints"))
    if not root.is_absolute():
        root = Path(area) / root
    return Path(os.path.realpath(root))


def run_root(checkpoint_root_dir: str, run_pk: int, area: Path) -> Path:
    return checkpoint_root(checkpoint_root_dir, area) / f"run-{run_pk}"


def launch_spec(data: dict[str, Any], cfg: Config, run_pk: int, area: Path) -> LaunchSpec:
    """The launch config of run ``run_pk`` from the user's mapping ``data`` and its loaded
    ``cfg`` (whose resolved values give each path's value); ``area``: the runs area of the
    run's owner, where a relative ``checkpoint_root_dir`` goes."""
    seen = written(cfg)
    out = copy.deepcopy(dict(data))
    _absolute_paths(out, seen, under_buffer=False)
    root = run_root(seen.checkpoint_root_dir, run_pk, area)
    out["checkpoint_root_dir"] = str(root)
    parts = [p for p in (seen.project, seen.group, seen.name) if p]
    return LaunchSpec(config=out, run_root=root, job_dir=root.joinpath(*parts))


def _absolute_paths(node: Any, resolved: Any, *, under_buffer: bool) -> None:
    """Walk the user's mapping beside the loaded config, rewriting path values in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            sub = _child(resolved, key)
            if sub is _MISSING:
                continue
            if key in _PATH_KEYS and isinstance(value, str):
                node[key] = _absolute(sub, experience_buffer=under_buffer)
            else:
                _absolute_paths(value, sub, under_buffer=under_buffer or key == "experience_buffer")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            sub = _child(resolved, i)
            if sub is not _MISSING:
                _absolute_paths(item, sub, under_buffer=under_buffer)


_MISSING = object()


def _child(obj: Any, key: Any) -> Any:
    if isinstance(key, int):
        return obj[key] if isinstance(obj, list | tuple) and key < len(obj) else _MISSING
    if is_dataclass(obj):
        return getattr(obj, key, _MISSING)
    if isinstance(obj, dict):
        return obj.get(key, _MISSING)
    return _MISSING


def _absolute(value: Any, *, experience_buffer: bool) -> Any:
    if not isinstance(value, str) or not value.strip() or value.startswith(_URL_PREFIXES):
        return value
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return str(path)
    work = Path(settings.RFT_WORK_DIR)
    if experience_buffer and not (work / path).exists():
        return value  # a mirror under <job_dir>/buffer/, as rft_core.buffer places it
    return os.path.abspath(work / path)


def stage_total_steps(config: dict[str, Any], stage: str) -> int | None:
    """``buffer.total_steps`` of ``stage`` in a launch config (``webapp.runs.progress.stage_plan``);
    None when the stage runs by epochs instead, or the config names no such stage."""
    from webapp.runs.progress import stage_plan

    for entry in stage_plan(config):
        if entry["name"] == stage:
            return entry["total_steps"]
    return None
