"""User plugins (rft_core/plugins.py): ``trinity run --plugin-dir DIR`` and ``TRINITY_PLUGIN_DIRS``
load the user's own workflows and rewards, in the driver (the config check sees them) and in the
run's Ray actors (other processes). Every run here is a real ``trinity run`` subprocess, so the
plugins never register in this test process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from run_configs import demo_taskset, run_config

ROOT = Path(__file__).resolve().parents[2]
INFO_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO \S+:\d+\] ")

PLUGIN = """
import os

from rft_core import rewards
from rft_core.workflows import register
from rft_core.workflows.simple import SimpleWorkflow

# every process that imports this file says so (the driver, then the run's actors)
if os.environ.get("PLUGIN_MARKER"):
    with open(os.environ["PLUGIN_MARKER"], "a") as marker:
        marker.write(f"{os.getpid()}\\n")


@rewards.register("starts_with_think")
def starts_with_think(response: str, truth: str, *, bonus: float = 1.0) -> dict[str, float]:
    return {"thinks_first": bonus if response.startswith("<think>") else 0.0}


@register("plugin_workflow")
class PluginWorkflow(SimpleWorkflow):
    default_reward_fn = "starts_with_think"
"""


def _trinity(*args: str, cwd: Path, env: dict | None = None, timeout: int = 120):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_ADDRESS"))}
    full["PYTHONPATH"] = str(ROOT)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rft_core.cli", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _plugin_dir(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def _config(demo, root: Path, workflow: str = "plugin_workflow", steps: int = 2) -> Path:
    taskset = demo_taskset(demo, default_workflow_type=workflow, reward_fn_args={"bonus": 2.0})
    cfg = run_config(
        demo,
        root / "ckpt",
        "run",
        buffer={"total_steps": steps, "explorer_input": {"taskset": taskset}},
    )
    cfg["project"] = "plugins"
    path = root / "config.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def test_a_plugin_workflow_and_reward_run_in_the_actors_of_a_real_trinity_run(demo, tmp_path):
    plugins = _plugin_dir(tmp_path / "my plugins", {"my_plugin.py": PLUGIN})
    marker = tmp_path / "imported_by.txt"
    config = _config(demo, tmp_path)
    proc = _trinity(
        "run",
        "--config",
        str(config),
        "--plugin-dir",
        str(plugins),
        cwd=tmp_path,
        env={"PLUGIN_MARKER": str(marker)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the driver imported it once, and so did the actor processes
    pids = marker.read_text().split()
    assert len(pids) == len(set(pids)) >= 2
    job_dir = tmp_path / "ckpt" / "plugins" / "run"
    rows = [
        json.loads(line)
        for line in (job_dir / "monitor" / "explorer_metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    rollout = [r for r in rows if "rollout/thinks_first/mean" in r.get("metrics", r)]
    assert len(rollout) == 2  # the plugin reward's part, logged at both explorer steps
    for row in rollout:
        value = row.get("metrics", row)["rollout/thinks_first/mean"]
        assert value in (0.0, 0.5, 1.0, 1.5, 2.0)  # 4 responses, bonus 2.0 each or 0
    trainer = (job_dir / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    assert len([line for line in trainer if "actor/pg_loss" in line]) == 2


def test_the_env_var_loads_plugins_for_the_config_check(demo, tmp_path):
    plugins = _plugin_dir(tmp_path / "p", {"my_plugin.py": PLUGIN})
    config = _config(demo, tmp_path)
    without = _trinity("run", "--config", str(config), "--dry-run", cwd=tmp_path)
    assert without.returncode == 2
    assert "unknown workflow 'plugin_workflow'" in without.stderr
    proc = _trinity(
        "run",
        "--config",
        str(config),
        "--dry-run",
        cwd=tmp_path,
        env={"TRINITY_PLUGIN_DIRS": os.pathsep.join([str(plugins), str(tmp_path / "p")])},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "default_workflow_type: plugin_workflow" in proc.stdout


def _dry_run_error(demo, tmp_path: Path, *plugin_dirs: Path) -> str:
    """The one line a dry run with ``--plugin-dir`` for each of ``plugin_dirs`` fails with."""
    options = [arg for d in plugin_dirs for arg in ("--plugin-dir", str(d))]
    config = _config(demo, tmp_path)
    proc = _trinity("run", "--config", str(config), "--dry-run", *options, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    # the run log's INFO lines ("loaded plugin ...", rft_core.runtime.run_log) tell what went
    # well before it; the error is the one other line
    lines = [line for line in proc.stderr.strip().splitlines() if not INFO_LINE.match(line)]
    err = "\n".join(lines)
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    return err


def test_a_plugin_that_fails_to_import_is_one_line_naming_the_file(demo, tmp_path):
    plugins = _plugin_dir(
        tmp_path / "p", {"good.py": PLUGIN, "broken.py": "import os\n\nvalue = 1 / 0\n"}
    )
    err = _dry_run_error(demo, tmp_path, plugins)
    assert f"plugin {plugins / 'broken.py'}:3: failed to import: ZeroDivisionError" in err


def test_a_plugin_name_that_exists_is_an_error_naming_both(demo, tmp_path):
    clash = """
    from rft_core.workflows import register
    from rft_core.workflows.simple import SimpleWorkflow

    @register("math_workflow")
    class MyMath(SimpleWorkflow):
        pass
    """
    plugins = _plugin_dir(tmp_path / "p", {"clash.py": clash})
    err = _dry_run_error(demo, tmp_path, plugins)
    assert "workflow 'math_workflow' of rft_plugins.clash.MyMath" in err
    assert str(plugins / "clash.py") in err
    assert "already registered by rft_core.workflows.math.MathWorkflow" in err


def test_two_plugins_registering_one_name_are_both_named(demo, tmp_path):
    a = _plugin_dir(tmp_path / "a", {"first.py": PLUGIN})
    b = _plugin_dir(tmp_path / "b", {"second.py": PLUGIN})
    err = _dry_run_error(demo, tmp_path, a, b)
    assert "reward function 'starts_with_think'" in err
    assert str(a / "first.py") in err and str(b / "second.py") in err


def test_a_missing_plugin_directory_is_refused(demo, tmp_path):
    err = _dry_run_error(demo, tmp_path, tmp_path / "nowhere")
    assert "plugin directory" in err and "nowhere" in err and "does not exist" in err
