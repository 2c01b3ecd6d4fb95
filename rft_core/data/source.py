"""Finding and reading the rows of a dataset named by ``path`` / ``subset_name`` / ``split``.

``path`` may be:

1. a directory as ``huggingface-cli download`` or ``modelscope download`` leave it:
   ``<path>/<subset_name>/<split>-00000-of-00001.parquet`` (also ``<split>.jsonl``,
   ``<split>/data-00000-of-00001.arrow`` as ``save_to_disk`` writes, shards in name order, data
   below a ``data/`` folder); a directory whose files name no split holds the ``train`` split;
2. a single ``.parquet`` / ``.jsonl`` / ``.json`` / ``.arrow`` file (subset and split ignored);
3. a dataset name (``openai/gsm8k``) found offline: a ``huggingface-cli download`` snapshot in
   the Hugging Face hub cache, or the Arrow files ``datasets.load_dataset`` left in its cache.
   Nothing is ever downloaded.

Files are read with pyarrow in place (``datasets`` is built on it) rather than through
``datasets.load_dataset``: that call reads ``dataset_infos.json`` / README features, which is
exactly what breaks ModelScope downloads whose ``dataset_infos.json`` lacks dtypes, and it copies
every file into its own cache first. Metadata files are never read as data.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from tqdm import tqdm

from rft_core.config.schema import ExperienceBufferConfig, TasksetConfig
from rft_core.errors import DataError

# what names a dataset: a taskset, or a buffer the trainer reads (SFT/DPO/expert data)
DatasetConfig = TasksetConfig | ExperienceBufferConfig

log = logging.getLogger(__name__)

DATA_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json")
# JSON files that describe a dataset rather than hold its rows
METADATA_FILES = {
    "dataset_infos.json",
    "dataset_info.json",
    "dataset_dict.json",
    "state.json",
    "config.json",
    ".mdl",
    ".msc",
}
KNOWN_SPLITS = ("train", "test", "validation", "valid", "dev", "eval")


@dataclass
class Rows:
    """The rows of one split: a pyarrow table or, for JSON, a list of dicts."""

    data: pa.Table | list[dict[str, Any]]
    files: list[Path]

    def __len__(self) -> int:
        return self.data.num_rows if isinstance(self.data, pa.Table) else len(self.data)

    @property
    def columns(self) -> list[str]:
        if isinstance(self.data, pa.Table):
            return list(self.data.column_names)
        keys: dict[str, None] = {}
        for row in self.data[:100]:
            keys.update(dict.fromkeys(row))
        return list(keys)

    def row(self, i: int) -> dict[str, Any]:
        if isinstance(self.data, pa.Table):
            return self.data.slice(i, 1).to_pylist()[0]
        return dict(self.data[i])  # a copy: a workflow may change its task's raw row

    def describe(self) -> str:
        if len(self.files) == 1:
            return str(self.files[0])
        return f"{self.files[0].parent} ({len(self.files)} files)"


def read_rows(
    path: str, subset_name: str | None = None, split: str = "train", *, progress: bool = False
) -> Rows:
    """Every row of the split; raises DataError saying what was looked for and where."""
    files = find_files(path, subset_name, split)
    tables: list[pa.Table] = []
    records: list[dict[str, Any]] = []
    if progress:
        files_iter = tqdm(files, desc=f"reading {path} ({split})", unit="file")
    else:
        files_iter = files
    for f in files_iter:
        data = _read_file(f)
        if isinstance(data, pa.Table):
            tables.append(data)
        else:
            records.extend(data)
    if tables and records:
        records = [r for t in tables for r in t.to_pylist()] + records
        tables = []
    if tables:
        try:
            data = (
                pa.concat_tables(tables, promote_options="default")
                if len(tables) > 1
                else tables[0]
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise DataError(f"the shards of {path} have different columns: {err}") from err
        rows = Rows(data, files)
    else:
        rows = Rows(records, files)
    if len(rows) == 0:
        raise DataError(f"dataset {path} (split {split!r}) has no rows: {rows.describe()}")
    return rows


def read_config_rows(cfg: DatasetConfig, where: str, what: str) -> Rows:
    """The rows named by a taskset/buffer config (``path``, ``subset_name``, ``split``); errors
    start with ``<where>.path``, the config's YAML path."""
    if not cfg.path:
        raise DataError(
            f"{where}.path: not set; give the {what} (a .jsonl/.parquet file, a dataset directory or a cached dataset name)"
        )
    try:
        return read_rows(
            cfg.path,
            cfg.subset_name,
            cfg.split,
            progress=getattr(cfg, "enable_progress_bar", False),
        )
    except DataError as err:
        raise DataError(f"{where}.path: {err}") from err


class DatasetMissing(DataError):
    """The dataset is not on this machine: neither a local path nor in the offline cache (it
    may exist where the run starts; ``trinity run --dry-run`` notes it and goes on)."""


def missing_dataset(cfg: DatasetConfig) -> str | None:
    """Why the dataset of a taskset/buffer config is not on this machine, or None when it is
    (or has no path, or fails otherwise: the read reports that)."""
    if not getattr(cfg, "path", None):
        return None
    try:
        find_files(cfg.path, cfg.subset_name, cfg.split)
    except DatasetMissing as err:
        return str(err)
    except DataError:
        return None
    return None


def find_files(path: str, subset_name: str | None = None, split: str = "train") -> list[Path]:
    """The data files of ``split`` (see the module docstring for the layouts understood)."""
    local = Path(os.path.expanduser(str(path)))
    if local.is_file():
        if local.suffix not in DATA_SUFFIXES:
            raise DataError(f"{local} is not a dataset file; use .parquet, .jsonl, .json or .arrow")
        return [local]
    if local.is_dir():
        return _split_files(_subset_dir(local, subset_name), split, str(local))
    text = str(path)
    if text.startswith(("/", "./", "../", "~")) or text.endswith(DATA_SUFFIXES):
        # a filesystem path, not a dataset name: no download hint
        raise DatasetMissing(f"{text!r} does not exist (no such file or directory)")
    cached = _find_in_cache(text, subset_name, split)
    if cached is not None:
        return cached
    raise DatasetMissing(
        f"{path!r} is neither a local file or directory nor a dataset in the offline Hugging Face cache "
        f"({_hub_cache()}); download it first, e.g. `huggingface-cli download {path} --repo-type dataset "
        f"--local-dir DIR` (or `modelscope download --dataset {path} --local_dir DIR`), then set path: DIR"
    )


# ---------------------------------------------------------------- local directories


def _subset_dir(root: Path, subset_name: str | None) -> Path:
    if (root / "data").is_dir() and _subsets(root / "data"):
        root = root / "data"  # data/<subset>/<split>-*.parquet, as some Hub datasets keep them
    subsets = _subsets(root)
    if not subset_name:
        if len(subsets) > 1:
            raise DataError(
                f"{root} holds several subsets ({', '.join(subsets)}); set subset_name to one of them"
            )
        return root
    candidate = root / subset_name
    if candidate.is_dir():
        return candidate
    if subsets:
        raise DataError(
            f"subset_name {subset_name!r} is not a subdirectory of {root}; subsets there: {', '.join(subsets)}"
        )
    return root  # a dataset with one subset keeps its files at the top


def _subsets(root: Path) -> list[str]:
    """Subdirectories holding data, except split folders (save_to_disk) and ``data/``."""
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in KNOWN_SPLITS
        and p.name != "data"
        and _data_files(p)
    )


def _data_files(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if (
                name.endswith(DATA_SUFFIXES)
                and name not in METADATA_FILES
                and not name.startswith(".")
            ):
                found.append(Path(dirpath) / name)
    return found


def _split_of(file: Path, root: Path) -> str | None:
    """The split a file belongs to: its name's prefix (train-00000-of-00001, train.jsonl,
    gsm8k-train.arrow) or the folder it sits in (train/data-00000-of-00001.arrow)."""
    stem = file.name.split(".")[0]
    for split in KNOWN_SPLITS:
        if _names_split(stem, split):
            return split
    for part in file.relative_to(root).parts[:-1]:
        if part in KNOWN_SPLITS:
            return part
    return None


def _names_split(stem: str, split: str) -> bool:
    return re.fullmatch(rf"(.*[-_])?{re.escape(split)}([-_].*)?", stem) is not None


def _split_files(root: Path, split: str, shown: str) -> list[Path]:
    files = _data_files(root)
    if not files:
        raise DataError(f"no data files (.parquet, .jsonl, .json, .arrow) under {root}")
    by_split: dict[str | None, list[Path]] = {}
    for f in files:
        by_split.setdefault(_split_exact(f, root, split), []).append(f)
    chosen = by_split.get(split)
    if not chosen:
        named = {s for s in (_split_of(f, root) for f in files) if s}
        if not named and split == "train":
            chosen = files  # files that name no split are the train split, as in `datasets`
        else:
            raise DataError(
                f"split {split!r} not found in {shown}"
                + (f" (subset dir {root})" if str(root) != shown else "")
                + f"; splits there: {', '.join(sorted(named)) or 'none named (only train)'}"
            )
    return _one_format(chosen)


def _split_exact(file: Path, root: Path, split: str) -> str | None:
    """``split`` when the file belongs to it (custom split names too), else its known split."""
    if _names_split(file.name.split(".")[0], split):
        return split
    if split in file.relative_to(root).parts[:-1]:
        return split
    return _split_of(file, root)


def _one_format(files: list[Path]) -> list[Path]:
    for suffix in DATA_SUFFIXES:  # a split kept in two formats: read the first in this order
        same = [f for f in files if f.suffix == suffix]
        if same:
            if len(same) < len(files):
                log.info("reading the %s files of the split and ignoring the others", suffix)
            return same
    return files


# ---------------------------------------------------------------- offline caches


def _hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def _hub_cache() -> Path:
    return Path(
        os.environ.get("HF_HUB_CACHE")
        or os.environ.get("HUGGINGFACE_HUB_CACHE")
        or _hf_home() / "hub"
    )


def _datasets_cache() -> Path:
    return Path(os.environ.get("HF_DATASETS_CACHE") or _hf_home() / "datasets")


def _find_in_cache(name: str, subset_name: str | None, split: str) -> list[Path] | None:
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        return None
    snapshots = _hub_cache() / f"datasets--{name.replace('/', '--')}" / "snapshots"
    if snapshots.is_dir():
        revisions = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        for rev in revisions:
            if _data_files(rev):
                return _split_files(
                    _subset_dir(rev, subset_name), split, f"{name} (hub cache {rev})"
                )
    built = _datasets_cache() / name.replace("/", "___") / (subset_name or "default")
    if built.is_dir():
        pattern = re.compile(rf".*-{re.escape(split)}(-\d{{5}}-of-\d{{5}})?\.arrow")
        found = sorted(p for p in built.rglob("*.arrow") if pattern.fullmatch(p.name))
        if found:
            newest = max(found, key=lambda p: p.stat().st_mtime).parent
            return [p for p in found if p.parent == newest]
    return None


# ---------------------------------------------------------------- readers


def _read_file(file: Path) -> pa.Table | list[dict[str, Any]]:
    try:
        if file.suffix == ".parquet":
            return pq.read_table(file)
        if file.suffix == ".arrow":
            return _read_arrow(file)
        return _read_json(file)
    except DataError:
        raise
    except (OSError, pa.ArrowException, ValueError) as err:
        raise DataError(f"cannot read {file}: {' '.join(str(err).split())}") from err


def _read_arrow(file: Path) -> pa.Table:
    try:
        with pa.memory_map(str(file)) as source:
            return ipc.open_stream(source).read_all()  # what datasets writes
    except pa.ArrowInvalid:
        with pa.memory_map(str(file)) as source:
            return ipc.open_file(source).read_all()


def _read_json(file: Path) -> list[dict[str, Any]]:
    """JSON lines, a JSON list of records, or ``{"data": [...]}`` / columns as lists."""
    text = file.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if file.suffix == ".json" and stripped[:1] in "[{":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None  # JSON lines saved as .json
        if isinstance(whole, list):
            return _records(whole, file)
        if isinstance(whole, dict):
            lists = {k: v for k, v in whole.items() if isinstance(v, list)}
            if len(lists) == 1 and all(isinstance(r, dict) for r in next(iter(lists.values()))):
                return _records(next(iter(lists.values())), file)
            if lists and len(lists) == len(whole) and len({len(v) for v in lists.values()}) == 1:
                keys = list(lists)
                return [
                    dict(zip(keys, values, strict=True))
                    for values in zip(*lists.values(), strict=True)
                ]
            return _records([whole], file)
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DataError(
                f"{file}:{lineno}: not valid JSON ({err.msg}); each line must be one JSON object"
            ) from err
    return _records(rows, file)


def _records(rows: list[Any], file: Path) -> list[dict[str, Any]]:
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(
                f"{file}: row {i} is a {type(row).__name__}, expected a JSON object with named fields"
            )
    return rows
