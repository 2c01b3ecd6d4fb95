"""Several cross-field problems of one config at once, each under its YAML path with the CLI's
wording, in the API's ``error_list``, the YAML tab and beside each field of the form."""

from __future__ import annotations

import copy

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.utils.html import escape

from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post
from webapp.experiments.models import Experiment

pytestmark = pytest.mark.django_db

# the CLI's lines (tests/core/config/test_config_cross_field_errors.py has the same rules alone)
LENGTHS = (
    "max_prompt_tokens 100 + max_response_tokens 64 = 164 exceeds max_model_len 128; raise "
    "max_model_len or lower one of the two"
)
DUPLICATE = (
    "duplicate eval taskset name 'arithmetic-eval' (also eval_tasksets[0]); metric names "
    "eval/<name>/... would collide (inherited by stages 'sft_warmup', 'rft')"
)
QUEUE = "queue has no writer in mode train with algorithm_type sft; use file (a dataset) or sql"
GROUP = (
    "grpo compares the rollouts of one task, so it needs a group of at least 2 (got 1); set "
    "repeat_times to e.g. 8"
)


def _three_rules_broken() -> dict:
    """The demo with a duplicate eval name (global buffer, inherited by both stages: the SFT
    warmup evaluates on the global eval tasksets too), a queue
    the SFT warmup stage cannot read, and a group of one in the rft stage."""
    data = yaml.safe_load(django_settings.RFT_DEMO_CONFIG.read_text())
    ei = data["buffer"]["explorer_input"]
    ei["eval_tasksets"].append(copy.deepcopy(ei["eval_tasksets"][0]))
    data["stages"][0]["buffer"]["trainer_input"]["experience_buffer"]["storage_type"] = "queue"
    data["stages"][1]["algorithm"] = {"algorithm_type": "grpo", "repeat_times": 1}
    return data


EXPECTED = [  # stage by stage: the SFT warmup's two problems first
    ("buffer.explorer_input.eval_tasksets[1].name", DUPLICATE),
    ("stages[0].buffer.trainer_input.experience_buffer.storage_type", QUEUE),
    ("stages[1].algorithm.repeat_times", GROUP),
]


def test_the_api_lists_three_cross_field_errors_with_path_and_message(roots):
    from api_helpers import token_client

    api, _ = token_client(get_user_model().objects.create_user("alice", password="pw-alice-123"))
    response = api.post(
        "/api/v1/experiments/",
        {"name": "e", "config": _three_rules_broken()},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert [(e["path"], e["message"]) for e in response.json()["error_list"]] == EXPECTED
    assert Experiment.objects.count() == 0


def test_the_yaml_tab_lists_four_cross_field_errors(client, roots):
    client.force_login(get_user_model().objects.create_user("alice", password="pw-alice-123"))
    data = _three_rules_broken()
    data["model"]["max_prompt_tokens"] = 100  # inherited by both stages: one line naming both
    response = client.post(
        "/experiments/new/",
        {"source": "yaml", "config_yaml": yaml.safe_dump(data), "experiment.name": "e"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    box = page[page.index('id="save-errors"') : page.index('id="experiment-form"')]
    lengths = f"{LENGTHS} (inherited by stages 'sft_warmup', 'rft')"
    for path, message in [("model.max_model_len", lengths), *EXPECTED]:
        line = f'<li data-path="{path}">{path}: {escape(message)}'
        assert line in box, line
    assert "Not saved: 4 problems" in page


def test_the_form_puts_each_cross_field_error_beside_its_field(client, roots):
    client.force_login(get_user_model().objects.create_user("alice", password="pw-alice-123"))
    form = build_form(_three_rules_broken())
    post = initial_post(form)
    post.update({"base_yaml": form.base_yaml, "source": "form", "experiment.name": "three"})
    post["model.max_prompt_tokens"] = "100"
    response = client.post("/experiments/new/", post)
    assert response.status_code == 400
    page = response.content.decode()

    def beside(name: str) -> str:
        start = page.index(f'id="f-{name}"')
        return page[start : page.index("</div>", start)]

    assert LENGTHS in beside("model.max_model_len")
    # a stage's overrides are fields of their own (stages[0].buffer....storage_type)
    assert escape(QUEUE) in beside(EXPECTED[1][0])
    assert escape(GROUP) in beside(EXPECTED[2][0])
    assert escape(DUPLICATE) in beside("buffer.explorer_input.eval_tasksets[1].name")
    assert "Not saved: 4 problems, each beside its field" in page
