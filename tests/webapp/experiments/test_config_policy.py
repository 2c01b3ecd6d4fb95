"""check_config, the gate every web-submitted config passes (webapp/experiments/config_policy.py):
safe bounded YAML, the oc.env allow-list, the CLI's validation, registered names, allowed path
roots; and the web process never imports torch for it."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from demo_rows import DEMO_YAML
from django.conf import settings as django_settings

from webapp.errors import ActionError
from webapp.experiments.config_policy import check_config

ROOT = Path(__file__).resolve().parents[3]


def demo(**changes) -> dict:
    """The demo config with ``{"a.b.c": value}`` changes (dotted paths, [i] for list items)."""
    data = yaml.safe_load(DEMO_YAML)
    for path, value in changes.items():
        node = data
        keys = path.replace("[", ".").replace("]", "").split(".")
        for key in keys[:-1]:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return data


def refused(**kwargs) -> ActionError:
    with pytest.raises(ActionError) as err:
        check_config(**kwargs)
    assert err.value.status == 400
    return err.value


def test_it_accepts_the_demo_config_and_keeps_its_interpolations():
    checked = check_config(config_yaml=DEMO_YAML)
    assert checked.data["model"]["model_path"] == "${oc.env:RFT_DEMO_DIR,./var/demo}/model"
    assert "${oc.env:RFT_DEMO_DIR,./var/demo}/gsm8k" in checked.canonical_yaml
    assert checked.config.model.model_path.endswith("var/demo/model")
    assert checked.config.algorithm.optimizer.lr == pytest.approx(3e-5)
    assert list(checked.data)[:4] == ["mode", "project", "name", "checkpoint_root_dir"]
    assert yaml.safe_load(checked.canonical_yaml) == checked.data


def test_it_accepts_a_mapping_as_well_as_yaml():
    checked = check_config(config=yaml.safe_load(DEMO_YAML))
    assert checked.config.buffer.batch_size == 8


def test_it_rejects_invalid_yaml():
    err = refused(config_yaml="model: [unclosed\n")
    assert err.message.startswith("the config is not valid YAML:")


def test_it_rejects_a_yaml_list():
    err = refused(config_yaml="- a\n- b\n")
    assert "must be a mapping of sections" in err.message


def test_it_rejects_an_unknown_key_with_a_did_you_mean_under_its_path():
    err = refused(config=demo(**{"buffer.batch_sise": 3}))
    assert "did you mean 'batch_size'?" in err.errors["buffer.batch_sise"]
    assert err.message == f"buffer.batch_sise: {err.errors['buffer.batch_sise']}"


def test_it_rejects_a_wrong_type_in_the_cli_wording():
    err = refused(config=demo(**{"buffer.batch_size": "eight"}))
    assert err.errors == {"buffer.batch_size": "must be an integer, got 'eight' (str)"}


def test_it_rejects_a_yaml_over_the_size_limit():
    text = DEMO_YAML + "# " + "x" * (300 * 1024) + "\n"
    err = refused(config_yaml=text)
    assert "the limit is 256 KB (RFT_YAML_MAX_BYTES)" in err.message


class WorkBudgetSpent(Exception):
    """More Python function calls than the budget: the work was not bounded."""


@contextmanager
def call_budget(calls: int):
    """Raise WorkBudgetSpent inside the code under test at its ``calls + 1``-th Python call
    (a profile hook; the previous one, a coverage tool's say, is put back after)."""
    made = 0
    previous = sys.getprofile()

    def count(frame, event, arg):
        nonlocal made
        if event == "call":
            made += 1
            if made > calls:
                raise WorkBudgetSpent(f"more than {calls} Python calls")

    sys.setprofile(count)
    try:
        yield
    finally:
        sys.setprofile(previous)


def test_it_refuses_a_billion_laughs_document_in_bounded_work():
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]")
    text = "\n".join(lines) + "\n"  # 10**9 "lol"s once its aliases are expanded
    # refused while composing, in a few hundred calls (382 when written); a parser that walked
    # or built the expanded document would make about one call per node, a billion
    with call_budget(20_000):
        err = refused(config_yaml=text)
    assert "aliases expand to more than 100 extra nodes" in err.message


def test_it_refuses_a_recursive_alias():
    err = refused(config_yaml="a: &a [*a]\n")
    assert "refers to itself" in err.message


def test_it_accepts_a_few_aliases():
    text = DEMO_YAML.replace("    format:\n", "    format: &fmt\n", 1)
    checked = check_config(config_yaml=text)
    assert checked.config.buffer.explorer_input.taskset.format.prompt_key == "question"


@pytest.mark.parametrize("var", ["SECRET_KEY", "DATABASE_URL", "HOME"])
def test_it_refuses_an_oc_env_variable_off_the_allow_list(var):
    err = refused(config=demo(**{"model.model_path": f"${{oc.env:{var},/x}}/model"}))
    assert f"reads the environment variable {var!r}" in err.errors["model.model_path"]
    assert "TRINITY_*, RFT_DEMO_DIR" in err.errors["model.model_path"]


@pytest.mark.parametrize(
    "value", ["${oc.decode:'[1]'}", "${oc.create:{a: 1}}", "${oc.env:${oc.decode:x}}"]
)
def test_it_refuses_other_resolvers_naming_the_yaml_path(value):
    err = refused(config=demo(**{"buffer.explorer_input.eval_tasksets[0].name": value}))
    assert list(err.errors) == ["buffer.explorer_input.eval_tasksets[0].name"]
    assert "is not allowed in a web config" in err.message


def test_it_allows_plain_references():
    checked = check_config(config=demo(**{"name": "${project}_run"}))
    assert checked.config.name == "demo_run"
    assert checked.data["name"] == "${project}_run"


@pytest.mark.parametrize("path", ["/etc", "../../etc/passwd", "/work/../etc"])
def test_it_refuses_a_model_path_outside_the_allowed_roots(path):
    err = refused(config=demo(**{"model.model_path": path}))
    assert "outside the allowed roots" in err.errors["model.model_path"]


def test_it_refuses_a_symlink_pointing_out(tmp_path, settings):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to("/etc")
    settings.RFT_ALLOWED_PATH_ROOTS = [root, *django_settings.RFT_ALLOWED_PATH_ROOTS]
    assert check_config(config=demo(**{"model.model_path": str(root / "model")}))
    with pytest.raises(ActionError) as err:
        check_config(config=demo(**{"model.model_path": str(root / "link" / "ssl")}))
    assert "resolves to /etc/ssl, outside the allowed roots" in err.value.errors["model.model_path"]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("buffer.explorer_input.taskset.path", "/etc"),
        ("buffer.explorer_input.eval_tasksets[0].path", "/etc"),
        ("buffer.trainer_input.experience_buffer.path", "sqlite:////etc/x.db"),
        ("buffer.trainer_input.experience_buffer.path", "sqlite:///../../../../../../../etc/x.db"),
        ("buffer.trainer_input.experience_buffer.path", "postgresql://db/x"),
        ("stages[0].buffer.trainer_input.experience_buffer.path", "/etc/sft.jsonl"),
        ("checkpoint_root_dir", "/tmp/elsewhere"),
        ("checkpoint_root_dir", "../../.."),
    ],
)
def test_it_refuses_every_kind_of_path_outside_the_allowed_roots(path, value):
    err = refused(config=demo(**{path: value}))
    assert path in err.errors, err.errors


def test_it_resolves_a_relative_checkpoint_root_under_the_runs_dir():
    checked = check_config(config=demo(checkpoint_root_dir="./checkpoints"))
    assert checked.config.checkpoint_root_dir == "./checkpoints"  # kept: launch prefixes it


def test_it_refuses_a_project_that_climbs_out_of_the_job_dir():
    err = refused(config=demo(project=".."))
    assert "cannot be a directory name" in err.errors["project"]


def test_it_refuses_an_unregistered_workflow_with_the_registered_ones():
    err = refused(
        config=demo(**{"buffer.explorer_input.taskset.default_workflow_type": "os.system"})
    )
    msg = err.errors["buffer.explorer_input.taskset.default_workflow_type"]
    assert msg.startswith("unknown workflow 'os.system'")
    registered = msg.split("registered: ", 1)[1].split(", ")
    assert {"countdown_workflow", "math_workflow", "simple_workflow"} <= set(registered)
    assert registered == sorted(registered)  # the registry's names, every one of them
    assert "os.system" not in registered


def test_it_refuses_an_unregistered_reward_fn():
    path = "buffer.explorer_input.eval_tasksets[0].default_reward_fn_type"
    err = refused(config=demo(**{path: "mypkg.rewards.evil"}))
    assert "unknown reward function 'mypkg.rewards.evil'" in err.errors[path]


def test_it_refuses_a_misspelt_advantage_argument():
    err = refused(config=demo(**{"algorithm.advantage_fn_args": {"epsilom": 0.1}}))
    assert "did you mean 'epsilon'" in err.errors["algorithm.advantage_fn_args.epsilom"]


def test_checking_a_config_imports_no_torch():
    code = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        "from webapp.experiments.config_policy import check_config\n"
        "check_config(config_yaml=settings.RFT_DEMO_CONFIG.read_text())\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
