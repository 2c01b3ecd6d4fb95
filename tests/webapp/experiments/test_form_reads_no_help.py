"""The form, the JSON schema's rules and the validator's derived fields come from the explicit
keys of each field declaration (``derived_from``, ``show_when``, ``deprecated``, ``level``,
``unimplemented``), never from its help text: with every help text replaced by arbitrary words,
including the ones older code looked for ("derived", "deprecated", "old ...", "vLLM's"),
everything but the help itself is unchanged."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest
import yaml
from django.conf import settings as django_settings

from rft_core.config import fields as config_fields
from rft_core.config import load as config_load
from webapp.experiments import form_build
from webapp.experiments.form_model import group_fields, list_blocks

json_schema_module = importlib.import_module("rft_core.config.json_schema")
HELP_TEXTS = ["", "old vLLM's deprecated derived value, see vLLM docs"]


def _demo() -> dict:
    data = yaml.safe_load(django_settings.RFT_DEMO_CONFIG.read_text())
    data["explorer"]["auxiliary_models"] = [{"model_path": "judge", "engine_type": "vllm"}]
    return data


def _with_help(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Every field's help reads ``text`` from here on (the walker every consumer reads)."""
    walk = config_fields.iter_fields

    def iter_fields(*args, **kwargs):
        for info in walk(*args, **kwargs):
            yield dataclasses.replace(info, help=text)

    monkeypatch.setattr(config_fields, "iter_fields", iter_fields)
    monkeypatch.setattr(json_schema_module, "iter_fields", iter_fields)
    config_load._derived_paths.cache_clear()
    form_build._schema.cache_clear()


def _form_without_help() -> list:
    form = form_build.build_form(_demo())
    out = [
        (f.name, f.label, f.kind, f.level, f.choices, f.show_when, f.text, f.default_text)
        for f in form.fields()
    ]
    for block in list_blocks(form):
        template = group_fields(block.template)
        out.append((block.name, block.level, [(f.name, f.level, f.show_when) for f in template]))
    return out


def _schema_without_help(node):
    if isinstance(node, dict):
        return {k: _schema_without_help(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_schema_without_help(v) for v in node]
    return node


@pytest.fixture
def as_declared():
    """The form and schema from the declarations as they are, caches cleared after."""
    config_load._derived_paths.cache_clear()
    form_build._schema.cache_clear()
    yield _form_without_help(), json.dumps(_schema_without_help(json_schema_module.json_schema()))
    config_load._derived_paths.cache_clear()
    form_build._schema.cache_clear()


@pytest.mark.parametrize("text", HELP_TEXTS)
def test_the_form_is_the_same_whatever_the_help_texts_say(monkeypatch, as_declared, text):
    form, _ = as_declared
    _with_help(monkeypatch, text)
    assert _form_without_help() == form
    helps = {f.help for f in form_build.build_form(_demo()).fields() if f.kind != "yaml"}
    assert text in helps  # the patched help did reach the form


@pytest.mark.parametrize("text", HELP_TEXTS)
def test_the_schema_rules_and_derived_fields_do_not_read_help(monkeypatch, as_declared, text):
    _, schema = as_declared
    derived = config_load._derived_paths()
    _with_help(monkeypatch, text)
    assert json.dumps(_schema_without_help(json_schema_module.json_schema())) == schema
    assert config_load._derived_paths() == derived


def test_the_rules_the_form_reads_are_in_the_schema(as_declared):
    form = {f.name: f for f in form_build.build_form(_demo()).fields()}
    # vLLM-only settings follow their own engine's type; the hf engine's CUDA-graph switch does not
    assert form["explorer.rollout_model.gpu_memory_utilization"].show_when == {
        "explorer.rollout_model.engine_type": ["vllm"]
    }
    assert form["explorer.auxiliary_models[0].enable_prefix_caching"].show_when == {
        "explorer.auxiliary_models[0].engine_type": ["vllm"]
    }
    assert form["explorer.rollout_model.enforce_eager"].show_when is None
    assert form["model.critic_model_path"].show_when == {"algorithm.algorithm_type": ["ppo"]}
    # deprecated spellings are left out of the form, their replacements are in it
    assert "algorithm.optimizer.warmup_style" not in form
    assert "algorithm.optimizer.lr_scheduler_type" in form
    assert "trainer.ppo_max_token_len_per_gpu" not in form
    # the level is the declaration's; an expert list's items are expert whatever they declare,
    # and taskset / eval_tasksets (one class) show a beginner their own beginner_keys
    assert form["buffer.explorer_input.taskset.path"].level == "beginner"
    assert form["buffer.explorer_input.taskset.name"].level == "expert"
    assert form["buffer.explorer_input.eval_tasksets[0].name"].level == "beginner"
    assert form["buffer.explorer_input.eval_tasksets[0].format.prompt_key"].level == "expert"
    assert form["explorer.auxiliary_models[0].model_path"].level == "expert"
    assert form["model.max_model_len"].level == "expert"
