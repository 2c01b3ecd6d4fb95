"""Every error of a config at once, each under its path, in the YAML tab, the form and the API
(``error_list``: ``[{path, message}]``, the CLI's wording); paths the config reads that do not
exist on the server are refused on save unless the user says they will exist on the cluster's
nodes (the form's checkbox, the API's ``paths_exist_elsewhere``)."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model

from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post
from webapp.experiments.models import Experiment, ExperimentVersion

pytestmark = pytest.mark.django_db

DEMO_YAML = django_settings.RFT_DEMO_CONFIG.read_text()
# the CLI's lines for these values (tests/core/config/test_config_all_errors.py)
LR = "must be a number, got '3e-5x' (str)"
TYPO = "unknown key 'batch_sise' (did you mean 'batch_size'?)"
LR_FAST = "must be a number, got 'fast' (str)"


@pytest.fixture
def alice_client(client, roots):
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    client.force_login(alice)
    return client


def _demo() -> dict:
    return yaml.safe_load(DEMO_YAML)


def test_the_yaml_tab_lists_every_error_with_its_path(alice_client):
    data = _demo()
    data["buffer"]["batch_sise"] = 4
    data["algorithm"]["optimizer"]["lr"] = "fast"
    response = alice_client.post(
        "/experiments/new/",
        {"source": "yaml", "config_yaml": yaml.safe_dump(data), "experiment.name": "e"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    box = page[page.index('id="save-errors"') : page.index('id="experiment-form"')]
    assert (
        '<li data-path="algorithm.optimizer.lr">algorithm.optimizer.lr: '
        + LR_FAST.replace("'", "&#x27;")
        in box
    )
    assert (
        '<li data-path="buffer.batch_sise">buffer.batch_sise: ' + TYPO.replace("'", "&#x27;") in box
    )
    assert "Not saved: 2 problems" in page
    assert Experiment.objects.count() == 0 and ExperimentVersion.objects.count() == 0


def test_the_form_puts_each_of_four_errors_beside_its_field(alice_client, roots):
    form = build_form(_demo())
    post = initial_post(form)
    post.update({"base_yaml": form.base_yaml, "source": "form", "experiment.name": "four"})
    post["algorithm.optimizer.lr"] = "3e-5x"
    post["buffer.batch_size"] = "-4"
    post["buffer.total_steps"] = "ten"
    post["model.model_path"] = str(roots[0] / "modle")
    response = alice_client.post("/experiments/new/", post)
    assert response.status_code == 400
    page = response.content.decode()

    def beside(name: str) -> str:
        start = page.index(f'id="f-{name}"')
        return page[start : page.index("</div>", start)]

    assert LR.replace("'", "&#x27;") in beside("algorithm.optimizer.lr")
    assert "must be &gt;= 1, got -4" in beside("buffer.batch_size")
    assert "must be an integer, got &#x27;ten&#x27; (str)" in beside("buffer.total_steps")
    assert "does not exist on this server" in beside("model.model_path")
    assert "Not saved: 4 problems, each beside its field" in page
    assert 'name="experiment.paths_exist_elsewhere"' in page  # the override is offered
    assert Experiment.objects.count() == 0


def test_a_missing_model_path_is_refused_on_save_until_the_user_says_it_will_exist(
    alice_client, roots
):
    form = build_form(_demo())
    post = initial_post(form)
    post.update({"base_yaml": form.base_yaml, "source": "form", "experiment.name": "cluster"})
    on_nodes = str(roots[0] / "on-the-nodes" / "qwen")  # inside the allowed roots, not here
    post["model.model_path"] = on_nodes
    response = alice_client.post("/experiments/new/", post)
    assert response.status_code == 400
    assert f"&#x27;{on_nodes}&#x27; does not exist on this server" in response.content.decode()
    assert Experiment.objects.count() == 0
    post["experiment.paths_exist_elsewhere"] = "on"
    response = alice_client.post("/experiments/new/", post)
    assert response.status_code == 302
    experiment = Experiment.objects.get()
    assert experiment.config["model"]["model_path"] == on_nodes


def test_a_run_made_from_the_form_is_named_after_its_experiment_not_the_demo(alice_client):
    form = build_form(_demo())
    post = initial_post(form)
    post.update({"base_yaml": form.base_yaml, "source": "form"})
    post.update({"experiment.name": "my lr sweep", "experiment.project": "sweeps"})
    assert alice_client.post("/experiments/new/", post).status_code == 302
    experiment = Experiment.objects.get()
    assert (experiment.config["project"], experiment.config["name"]) == ("sweeps", "my_lr_sweep")
    page = alice_client.get(f"/experiments/{experiment.pk}/edit/").content.decode()
    # one Name and one Project: the experiment's (the config's are written from them)
    assert 'name="name"' not in page and 'name="project"' not in page
    assert 'name="experiment.name"' in page and 'name="experiment.project"' in page


def test_the_beginner_form_is_short_and_shows_what_oc_env_reads(alice_client, roots):
    page = alice_client.get("/experiments/new/").content.decode()
    beginner = len(re.findall(r'<div class="field kind-\w+" data-level="beginner"', page))
    assert 15 <= beginner <= 25, beginner
    start = page.index('id="f-model.model_path"')
    assert (
        f"on this server: <code>{roots[0]}/model</code>"
        in page[start : page.index("</div>", start)]
    )


def test_a_stage_override_error_is_beside_that_stages_field(alice_client):
    data = _demo()
    data["stages"][1]["algorithm"] = {"algorithm_type": "grpo", "optimizer": {"lr": "slow"}}
    data["buffer"]["total_steps"] = "ten"
    response = alice_client.post(
        "/experiments/new/",
        {"source": "yaml", "config_yaml": yaml.safe_dump(data), "experiment.name": "e"},
    )
    page = response.content.decode()
    # an expert field with an error is shown to a beginner too
    assert '<div class="field kind-number has-error" data-level="beginner">' in page
    start = page.index('id="f-stages[1].algorithm.optimizer.lr"')
    assert "must be a number, got &#x27;slow&#x27;" in page[start : page.index("</div>", start)]
    start = page.index('id="f-buffer.total_steps"')
    assert "must be an integer" in page[start : page.index("</div>", start)]


def test_an_error_in_a_stages_eval_taskset_is_beside_that_field_in_the_clis_words(alice_client):
    from rft_core.config import load_config_from_dict
    from rft_core.errors import ConfigError

    data = _demo()
    buffer = copy.deepcopy(data["buffer"])
    good = buffer["explorer_input"]["eval_tasksets"][0]
    buffer["explorer_input"]["eval_tasksets"] = [
        good,
        {**good, "name": "b", "repeat_times": "many"},
    ]
    data["stages"][1]["buffer"] = buffer
    with pytest.raises(ConfigError) as cli:
        load_config_from_dict(data)
    where = "stages[1].buffer.explorer_input.eval_tasksets[1].repeat_times"
    assert str(cli.value) == f"{where}: must be an integer, got 'many' (str)"
    response = alice_client.post(
        "/experiments/new/",
        {"source": "yaml", "config_yaml": yaml.safe_dump(data), "experiment.name": "e"},
    )
    page = response.content.decode()
    start = page.index(f'id="f-{where}"')
    beside = page[start : page.index("</div>", start)]
    assert "must be an integer, got &#x27;many&#x27; (str)" in beside
    assert 'value="many"' in beside  # the field holds what was typed


def test_the_api_returns_every_error_as_a_list_of_path_and_message(roots):
    from api_helpers import token_client

    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    api, _ = token_client(alice)
    data = _demo()
    data["buffer"]["batch_sise"] = 4
    data["algorithm"]["optimizer"]["lr"] = "fast"
    data["buffer"]["batch_size"] = -4
    response = api.post(
        "/api/v1/experiments/", {"name": "e", "config": data}, content_type="application/json"
    )
    assert response.status_code == 400
    body = response.json()
    assert [e["path"] for e in body["error_list"]] == [
        "algorithm.optimizer.lr",
        "buffer.batch_sise",
        "buffer.batch_size",
    ]
    messages = [e["message"] for e in body["error_list"]]
    assert messages[0] == LR_FAST and messages[1].startswith(TYPO)
    # the demo's rft stage inherits the global buffer: the CLI's line says so
    assert messages[2] == "must be >= 1, got -4 (inherited by stage 'rft')"
    assert body["detail"] == f"algorithm.optimizer.lr: {LR_FAST} (and 2 more)"
    assert body["errors"]["buffer.batch_size"] == messages[2]
    assert Experiment.objects.count() == 0


def test_the_api_refuses_a_missing_path_unless_paths_exist_elsewhere(roots):
    from api_helpers import token_client

    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    api, _ = token_client(alice)
    data = _demo()
    data["buffer"]["explorer_input"]["taskset"]["path"] = str(roots[0] / "on-the-nodes")
    body = {"name": "e", "config": data}
    response = api.post("/api/v1/experiments/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["missing_paths"] == ["buffer.explorer_input.taskset.path"]
    assert response.json()["error_list"][0]["path"] == "buffer.explorer_input.taskset.path"
    response = api.post(
        "/api/v1/experiments/",
        {**body, "paths_exist_elsewhere": True},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
