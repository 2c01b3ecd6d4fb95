"""``trinity convert``: turn ``global_step_*`` actor checkpoints into Hugging Face safetensors.

    trinity convert --checkpoint-dir D [--base-model-dir B] [--step 100,200] [--dtype auto] [--force]

Which checkpoints: ``D`` may be a job dir (every ``global_step_<N>`` directory below it, at any
depth; hidden directories and the inside of a found step are not searched), one
``global_step_<N>``, or a path inside one (``.../global_step_120/actor/huggingface``): the
nearest enclosing component named exactly ``global_step_<digits>`` that has an ``actor/`` is
taken. A name that merely contains the text (``global_step_foo``, ``my_global_step_runs``) is
an ordinary directory: the search below it is a single bounded ``os.walk`` that does not follow
symlinks, so it cannot loop.

What: only ``actor/`` (a ``critic/`` is left alone and listed in the report). The weight layout
is detected (:mod:`rft_core.checkpoint.formats`: FSDP shards at any world size incl. DTensor and
ShardedTensor files, Megatron TP/PP ``mp_rank_XX``, a state-dict ``model.safetensors``),
checked against the architecture in ``config.json`` and written to
``actor/huggingface/model.safetensors`` (sharded with an index above 5 GB) beside
``config.json``, ``generation_config.json`` and the tokenizer files. When
``huggingface/config.json`` is missing they are copied from ``--base-model-dir``.

Idempotent and atomic: a step whose ``huggingface/`` already holds finished weights is skipped
after a directory listing (no tensor is read); ``force`` converts again. Weights are written
in a hidden temporary directory and moved in with ``os.replace``, the file readers look for
(``model.safetensors`` or the index) last, so a killed conversion never leaves files that a
rerun would take for finished; the rerun removes the leftovers of dead processes.

``dtype``: ``auto`` = the ``dtype``/``torch_dtype`` in config.json, else the tensors' own;
``bf16``/``fp16``/``fp32`` force one (and config.json's dtype is updated to match).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoConfig, GenerationConfig

from rft_core import dtypes
from rft_core.checkpoint.formats import check_against_architecture, open_actor_weights
from rft_core.checkpoint.formats.hf_safetensors import (
    DEFAULT_MAX_SHARD_BYTES,
    drop_tied_weights,
    remove_dead_temp_dirs,
    write_hf_weights,
)
from rft_core.checkpoint.layout import (
    actor_dir,
    find_step_dirs,
    hf_dir,
    hf_weights_complete,
    replacing,
    step_of,
    write_json_atomic,
)
from rft_core.checkpoint.retention import pinned_step
from rft_core.errors import ConvertError, RFTError

ProgressFn = Callable[[str, int, int], None]
# files of a base model directory that describe it (everything but weights)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


@dataclass
class StepOutcome:
    step: int
    path: Path
    reason: str = ""
    format: str = ""
    files: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return str(self.path)


@dataclass
class ConvertReport:
    converted: list[StepOutcome] = field(default_factory=list)
    skipped: list[StepOutcome] = field(default_factory=list)
    failed: list[StepOutcome] = field(default_factory=list)
    critic_ignored: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No requested step failed and at least one was converted or already converted."""
        return not self.failed and bool(self.converted or self.skipped)

    def summary(self) -> str:
        lines = [
            f"converted {len(self.converted)}, skipped {len(self.skipped)}, "
            f"failed {len(self.failed)}"
        ]
        for o in self.converted:
            lines.append(
                f"  converted  {o.label}  ({o.format}, {o.seconds:.1f} s) -> {', '.join(o.files)}"
            )
        for o in self.skipped:
            lines.append(f"  skipped    {o.label}  ({o.reason})")
        for o in self.failed:
            lines.append(f"  FAILED     {o.label}  {o.reason}")
        for p in self.critic_ignored:
            lines.append(f"  note: {p} left alone (trinity convert handles the actor only)")
        return "\n".join(lines)


def _copy_model_metadata(base: Path, hf: Path) -> None:
    """Copy config, generation config and tokenizer files (not weights) from a base model dir;
    each file through a temporary name, config.json last."""
    names = sorted(
        f.name
        for f in base.iterdir()
        if f.is_file()
        and not f.name.startswith(".")
        and not f.name.endswith(WEIGHT_SUFFIXES)
        and f.name not in WEIGHT_INDEXES
    )
    names.sort(key=lambda n: n == "config.json")
    for name in names:
        with replacing(hf / name) as tmp:
            shutil.copyfile(base / name, tmp)


def _check_dtype(dtype: str) -> None:
    if dtype != dtypes.AUTO and dtype not in dtypes.SHORT_ALIASES:
        choices = ", ".join([dtypes.AUTO, *dtypes.SHORT_ALIASES])
        raise ConvertError(f"--dtype {dtype}: choose one of {choices}")


def _resolve_dtype(dtype: str, config_json: dict) -> torch.dtype | None:
    if dtype != dtypes.AUTO:
        _check_dtype(dtype)
        return dtypes.torch_dtype(dtype)
    name = config_json.get("dtype") or config_json.get("torch_dtype")
    if isinstance(name, str) and name in (*dtypes.WEIGHT_DTYPES, *dtypes.ALIASES):
        return dtypes.torch_dtype(name)
    return None  # keep the tensors' own dtype


def convert_step(
    step_path: Path,
    *,
    base_model_dir: str | Path | None = None,
    dtype: str = "auto",
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> StepOutcome:
    """Convert one ``global_step_<N>`` directory. Returns an outcome with ``reason`` set when
    it was skipped; raises RFTError when it cannot be converted. The step is pinned while it
    converts: a trainer's checkpoint retention does not delete it meanwhile."""
    with pinned_step(step_path, "convert"):
        return _convert_step(
            step_path,
            base_model_dir=base_model_dir,
            dtype=dtype,
            force=force,
            progress=progress,
            max_shard_bytes=max_shard_bytes,
        )


def _convert_step(
    step_path: Path,
    *,
    base_model_dir: str | Path | None,
    dtype: str,
    force: bool,
    progress: Callable[[int, int], None] | None,
    max_shard_bytes: int,
) -> StepOutcome:
    outcome = StepOutcome(step_of(step_path), step_path)
    started = time.perf_counter()
    actor = actor_dir(step_path)
    if not actor.is_dir():
        raise ConvertError(f"{step_path} has no actor/ directory")
    hf = hf_dir(step_path)
    remove_dead_temp_dirs(hf)
    if not force and hf_weights_complete(hf):
        outcome.reason = "already converted; --force converts again"
        return outcome
    if (hf / "config.json").is_file():
        config_dir, base = hf, None
    elif base_model_dir is None:
        raise ConvertError(
            f"{hf / 'config.json'} is missing: pass --base-model-dir with the base model "
            "(the directory holding its config.json and tokenizer files)"
        )
    else:
        base = Path(base_model_dir).expanduser()
        if not (base / "config.json").is_file():
            raise ConvertError(f"--base-model-dir {base_model_dir}: no config.json there")
        config_dir = base
    try:
        config_json = json.loads((config_dir / "config.json").read_text())
        cfg = AutoConfig.from_pretrained(config_dir)
    except (ValueError, KeyError) as err:
        raise ConvertError(
            f"{config_dir / 'config.json'} cannot be read as a model config: {err}"
        ) from err

    weights = open_actor_weights(actor, cfg)
    outcome.format = weights.format_name
    check_against_architecture(weights, cfg, actor)
    weights = drop_tied_weights(weights.with_dtype(_resolve_dtype(dtype, config_json)), cfg)

    hf.mkdir(exist_ok=True)
    if base is not None:
        _copy_model_metadata(base, hf)
    if dtype != dtypes.AUTO:
        dtype_name = dtypes.canonical(dtype)
        current = json.loads((hf / "config.json").read_text())
        if current.get("dtype", current.get("torch_dtype")) != dtype_name:
            current.pop("torch_dtype", None)
            write_json_atomic(hf / "config.json", {**current, "dtype": dtype_name})
    if not (hf / "generation_config.json").is_file():
        GenerationConfig.from_model_config(cfg).save_pretrained(hf)
    threads = torch.get_num_threads()
    # merging and casting are memory-bound: one thread is as fast on an idle machine, and on
    # a busy one OpenMP's barriers made the casts ~40x slower (measured on 2 shared cores)
    torch.set_num_threads(1)
    try:
        outcome.files = write_hf_weights(
            hf, weights, max_shard_bytes=max_shard_bytes, progress=progress
        )
    finally:
        torch.set_num_threads(threads)
    outcome.seconds = time.perf_counter() - started
    return outcome


def convert_checkpoints(
    checkpoint_dir: str | Path,
    *,
    base_model_dir: str | Path | None = None,
    steps: Sequence[int] | None = None,
    dtype: str = "auto",
    force: bool = False,
    progress: ProgressFn | None = None,
    show_progress_bar: bool = False,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> ConvertReport:
    """Convert every checkpoint ``checkpoint_dir`` designates (optionally only ``steps``).
    ``progress(label, tensors_done, tensors_total)`` is called as tensors are written, label
    being the step directory's path. A failing step is recorded and the others still convert.
    Raises ConvertError when ``checkpoint_dir`` does not exist or holds no checkpoint."""
    _check_dtype(dtype)
    found = find_step_dirs(checkpoint_dir)
    if not found:
        raise ConvertError(
            f"no global_step_<N> directories found under {checkpoint_dir}; point --checkpoint-dir "
            "at a job dir (checkpoint_root_dir/project/name), a global_step_<N> or a path inside one"
        )
    report = ConvertReport()
    if steps is not None:
        wanted = set(steps)
        for missing in sorted(wanted - {s for s, _ in found}):
            report.failed.append(
                StepOutcome(
                    missing, Path(checkpoint_dir), reason=f"global_step_{missing} not found"
                )
            )
        found = [(s, p) for s, p in found if s in wanted]
    for step, path in found:
        if (path / "critic").is_dir():
            report.critic_ignored.append(path / "critic")
        bars: list = []  # one tqdm bar, made when the first tensor is written

        def on_tensor(done: int, total: int, _path: Path = path, _bars: list = bars) -> None:
            if show_progress_bar:
                if not _bars:
                    _bars.append(tqdm(total=total, desc=_path.name, unit="tensor", file=sys.stderr))
                _bars[0].update(done - _bars[0].n)
            if progress is not None:
                progress(str(_path), done, total)

        try:
            outcome = convert_step(
                path,
                base_model_dir=base_model_dir,
                dtype=dtype,
                force=force,
                progress=on_tensor,
                max_shard_bytes=max_shard_bytes,
            )
        except (RFTError, OSError) as err:
            report.failed.append(StepOutcome(step, path, reason=str(err)))
            continue
        finally:
            for bar in bars:
                bar.close()
        (report.skipped if outcome.reason else report.converted).append(outcome)
    return report


def parse_steps(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError as err:
        raise ConvertError(
            f"--step {text}: expected comma-separated step numbers, e.g. 100,200"
        ) from err


def cli_convert(args: argparse.Namespace) -> int:
    report = convert_checkpoints(
        args.checkpoint_dir,
        base_model_dir=args.base_model_dir,
        steps=parse_steps(args.step),
        dtype=args.dtype,
        force=args.force,
        show_progress_bar=sys.stderr.isatty(),
    )
    print(report.summary())
    return 0 if report.ok else 1
