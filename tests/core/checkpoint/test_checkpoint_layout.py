"""rft_core.checkpoint.layout: the torch-free readers of a job's tree, and the promise that the
web process's slice of rft_core (config, the monitor's event names, these readers) imports no
torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rft_core.checkpoint import layout
from rft_core.checkpoint.layout import (
    dir_size,
    hf_model_ready,
    latest_checkpoint_step,
    latest_state_dict_step,
    read_explorer_meta,
    read_trainer_meta,
    scan_checkpoints,
    stage_job_dirs,
)

REPO = Path(__file__).resolve().parents[3]


def _step(job: Path, n: int, *, full: bool = True, hf: str | None = None, payload: int = 0) -> Path:
    """A global_step_<n> as the trainer leaves it; ``hf``: None, "single", "sharded",
    "sharded-missing" (index naming a shard that is not there) or "no-config"."""
    actor = job / f"global_step_{n}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"x" * payload)
    if full:
        (job / f"global_step_{n}" / ".full_checkpoint").write_text(f"{n}\n")
    hf_dir = actor / "huggingface"
    if hf != "no-config":
        (hf_dir / "config.json").write_text("{}")
    if hf in ("single", "no-config"):
        (hf_dir / "model.safetensors").write_bytes(b"w")
    elif hf in ("sharded", "sharded-missing"):
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        index = {"weight_map": {"a": shards[0], "b": shards[1]}}
        (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index))
        for shard in shards[: 1 if hf == "sharded-missing" else 2]:
            (hf_dir / shard).write_bytes(b"w")
    return job / f"global_step_{n}"


def test_the_web_slice_of_rft_core_imports_no_torch():
    code = (
        "import sys\n"
        "import rft_core.config, rft_core.config.json_schema, rft_core.monitor\n"
        "import rft_core.monitor.events, rft_core.checkpoint, rft_core.checkpoint.layout\n"
        "rft_core.config.json_schema.json_schema()\n"
        "rft_core.config.load_config('examples/demo/grpo_demo.yaml')\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'django') if m in sys.modules)\n"
        "print(','.join(heavy) or 'clean')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


def test_the_event_names_are_defined_once_in_events_and_reexported():
    from rft_core import monitor
    from rft_core.monitor import events
    from rft_core.monitor import monitor as monitor_module

    assert (events.ENV_REDIS_URL, events.ENV_RUN_ID) == ("RFT_EVENTS_REDIS_URL", "RFT_RUN_ID")
    assert monitor.ENV_REDIS_URL is events.ENV_REDIS_URL
    assert monitor_module.ENV_RUN_ID is events.ENV_RUN_ID
    key = monitor.stream_key("r1", "dep-1")
    assert key == "rft:dep-1:run:r1" and monitor.run_id_of(key, "dep-1") == "r1"


def test_it_lists_the_steps_of_every_stage_with_their_hf_state(tmp_path):
    job = tmp_path / "proj" / "demo"
    (job / "monitor").mkdir(parents=True)
    (job / "buffer").mkdir()
    _step(job / "sft_warmup", 4, hf="single")
    _step(job / "rft", 2, hf="sharded")
    _step(job / "rft", 10, hf="sharded-missing")
    _step(job / "rft", 6, full=False)
    (job / "rft" / "latest_checkpointed_iteration.txt").write_text("10\n")
    (job / "notes").mkdir()  # an ordinary directory is not a stage

    assert [s for s, _ in stage_job_dirs(job)] == ["", "rft", "sft_warmup"]
    found = [(c.stage, c.step, c.full, c.hf_ready) for c in scan_checkpoints(job)]
    assert found == [
        ("rft", 2, True, True),
        ("rft", 6, False, False),
        ("rft", 10, True, False),
        ("sft_warmup", 4, True, True),
    ]
    assert latest_checkpoint_step(job / "rft") == 10
    assert latest_state_dict_step(job / "rft") == 10  # no latest_state_dict file: highest step


def test_an_unstaged_job_dir_is_its_own_stage(tmp_path):
    _step(tmp_path, 3, hf="single")
    (tmp_path / "monitor").mkdir()
    assert [(c.stage, c.step) for c in scan_checkpoints(tmp_path)] == [("", 3)]
    assert scan_checkpoints(tmp_path / "missing") == []


def test_weights_without_a_config_are_not_a_loadable_model(tmp_path):
    assert not hf_model_ready(_step(tmp_path, 1, hf="no-config"))
    assert hf_model_ready(_step(tmp_path, 2, hf="single"))


def test_a_corrupt_index_is_not_finished_weights(tmp_path):
    step = _step(tmp_path, 1, hf="sharded")
    (step / "actor" / "huggingface" / "model.safetensors.index.json").write_text('["not", "a"]')
    assert not hf_model_ready(step)


def test_dir_size_counts_regular_files_and_not_symlinks(tmp_path):
    step = _step(tmp_path, 1, payload=1000)
    (step / "actor" / "link.pt").symlink_to(step / "actor" / "model_world_size_1_rank_0.pt")
    # 1000 (shard) + 2 ("1\n" marker) + 2 ("{}" config.json)
    assert dir_size(step) == 1004
    assert dir_size(tmp_path / "gone") == 0


def test_it_reads_the_meta_files(tmp_path):
    assert read_explorer_meta(tmp_path) is None and read_trainer_meta(tmp_path) is None
    (tmp_path / layout.EXPLORER_META).write_text('{"latest_iteration": 7}')
    (tmp_path / layout.TRAINER_META).write_text('{"step": 6}')
    assert read_explorer_meta(tmp_path) == {"latest_iteration": 7}
    assert read_trainer_meta(tmp_path) == {"step": 6}


def test_the_writers_use_the_layouts_names():
    from rft_core import checkpoint, convert
    from rft_core import checkpoint as hf_safetensors

    assert checkpoint.list_step_dirs is layout.list_step_dirs
    assert checkpoint.latest_checkpoint_step is layout.latest_checkpoint_step
    assert hf_safetensors.hf_weights_complete is layout.hf_weights_complete
    assert convert.find_step_dirs is layout.find_step_dirs


# the calls that move or delete a directory or a file into/out of place
_TREE_MOVES = {("os", "replace"), ("os", "rename"), ("shutil", "rmtree"), ("shutil", "move")}
# modules that move or delete outside any job dir: the demo's own model/dataset directory
_NOT_THE_TREE = {"rft_core/demo.py"}


def test_only_the_checkpoint_package_moves_or_deletes_in_the_tree():
    """Renames into place and deletions (step dirs, meta and ``latest_*`` files, the
    converter's temporary dirs) happen in rft_core/checkpoint; everyone else calls it."""
    import ast

    found = []
    for top in ("rft_core", "webapp", "workers"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("rft_core/checkpoint/") or "/migrations/" in rel:
                continue
            if rel in _NOT_THE_TREE:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                func = node.func
                owner = func.value.id if isinstance(func.value, ast.Name) else None
                if (owner, func.attr) in _TREE_MOVES or func.attr == "rename":
                    found.append(f"{rel}:{node.lineno} {ast.unparse(func)}")
    assert not found, "move or delete the tree through rft_core.checkpoint:\n" + "\n".join(found)


def test_a_dead_conversions_temporary_dir_is_removed_and_a_live_ones_kept(tmp_path):
    import os

    from rft_core.checkpoint.formats.hf_safetensors import WEIGHTS_TMP_INFIX, remove_dead_temp_dirs

    hf = tmp_path / "actor" / layout.HF_DIR
    hf.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    for pid in (dead, str(os.getppid()), "junk"):
        (hf.parent / f".{layout.HF_DIR}{WEIGHTS_TMP_INFIX}{pid}").mkdir()
    remove_dead_temp_dirs(hf)
    left = sorted(p.name for p in hf.parent.iterdir())
    assert left == [f".{layout.HF_DIR}{WEIGHTS_TMP_INFIX}{os.getppid()}", layout.HF_DIR]
