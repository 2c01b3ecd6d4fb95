"""The form of the demo (two stages inheriting ``model``) saved with an empty model path: one
problem, one message beside the field, naming both stages (issue 31: it said the same twice)."""

from __future__ import annotations

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.utils.html import escape

from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post
from webapp.experiments.models import Experiment

pytestmark = pytest.mark.django_db

REQUIRED = (
    "required: a Hugging Face model directory (e.g. made by `trinity init-demo`) or a model "
    "name in the offline cache (inherited by stages 'sft_warmup', 'rft')"
)


def test_an_empty_model_path_is_one_message_beside_its_field(client, roots):
    client.force_login(get_user_model().objects.create_user("alice", password="pw-alice-123"))
    form = build_form(yaml.safe_load(django_settings.RFT_DEMO_CONFIG.read_text()))
    post = initial_post(form)
    post.update({"base_yaml": form.base_yaml, "source": "form", "experiment.name": "e"})
    post["model.model_path"] = ""
    response = client.post("/experiments/new/", post)
    assert response.status_code == 400
    page = response.content.decode()
    start = page.index('id="f-model.model_path"')
    field = page[start : page.index("</div>", start)]
    assert escape(REQUIRED) in field
    assert field.count("required: a Hugging Face model directory") == 1
    assert "Not saved." in page  # one problem: no count
    assert Experiment.objects.count() == 0
