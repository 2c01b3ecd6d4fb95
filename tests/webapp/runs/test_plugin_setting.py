"""The web path loads no plugin unless the deployment names a plugin directory in its settings
(``RFT_PLUGIN_DIRS``): a ``TRINITY_PLUGIN_DIRS`` in the web or Celery worker's environment is
ignored by the config check and overridden (empty) in every run's Ray job."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest
import yaml
from django.conf import settings as django_settings

from webapp.errors import ActionError
from webapp.experiments.config_policy import check_config
from webapp.runs.actions import runtime_env_of

PLUGIN = """
import os

from rft_core.workflows import register
from rft_core.workflows.simple import SimpleWorkflow

with open(os.environ["WEB_PLUGIN_MARKER"], "a") as marker:
    marker.write("imported\\n")


@register("web_plugin_workflow")
class WebPluginWorkflow(SimpleWorkflow):
    default_reward_fn = "math_reward"
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / "web_plugin.py").write_text(PLUGIN)
    monkeypatch.setenv("WEB_PLUGIN_MARKER", str(tmp_path / "marker"))
    return directory


def _config_naming_the_plugin() -> dict:
    data = yaml.safe_load(django_settings.RFT_DEMO_CONFIG.read_text())
    data["buffer"]["explorer_input"]["taskset"]["default_workflow_type"] = "web_plugin_workflow"
    return data


def test_it_ignores_trinity_plugin_dirs_without_the_setting(
    roots, plugin_dir, monkeypatch, tmp_path
):
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(plugin_dir))
    assert django_settings.RFT_PLUGIN_DIRS == []
    with pytest.raises(ActionError) as err:
        check_config(config=_config_naming_the_plugin())
    assert "unknown workflow 'web_plugin_workflow'" in str(err.value.message)
    assert not (tmp_path / "marker").exists()
    assert "rft_plugins.web_plugin" not in sys.modules
    env = runtime_env_of(SimpleNamespace(key="run-key"))
    assert env["env_vars"]["TRINITY_PLUGIN_DIRS"] == ""  # the job's actors load nothing either


def test_it_loads_the_plugins_the_setting_names(roots, plugin_dir, settings, tmp_path):
    settings.RFT_PLUGIN_DIRS = [str(plugin_dir)]
    checked = check_config(config=_config_naming_the_plugin())
    taskset = checked.config.buffer.explorer_input.taskset
    assert taskset.default_workflow_type == "web_plugin_workflow"
    assert (tmp_path / "marker").read_text() == "imported\n"
    env = runtime_env_of(SimpleNamespace(key="run-key"))
    assert env["env_vars"]["TRINITY_PLUGIN_DIRS"] == os.pathsep.join([str(plugin_dir)])
