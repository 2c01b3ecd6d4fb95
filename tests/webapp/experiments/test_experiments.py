"""Experiment pages and actions: list (search, filters, sort, pages, a query count that does not
grow with rows), create/edit from the form and the YAML tab, refused input (400, the message
beside its field, nothing written), detail, download, versions and diffs, clone, delete, and the
demo experiment command."""

from __future__ import annotations

import re

import pytest
import yaml
from demo_rows import DEMO_YAML
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments import actions
from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post
from webapp.experiments.models import Experiment, ExperimentVersion, Tag
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _demo_paths_exist(roots):
    """The demo config's model and data directories exist (a save refuses paths that do not)."""


@pytest.fixture
def staff():
    return get_user_model().objects.create_user("root", password="pw-root-123", is_staff=True)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def make(user, name="exp", **kwargs) -> Experiment:
    return actions.create_experiment(Actor(user=user), name=name, config_yaml=DEMO_YAML, **kwargs)


def add_run(experiment, number=1, status=RunStatus.SUCCEEDED, last=None, best=None) -> Run:
    run = Run.objects.create(
        experiment=experiment,
        number=number,
        status=status,
        config_yaml=experiment.config_yaml,
        config=experiment.config,
        last_eval_accuracy=last,
        best_eval_accuracy=best,
    )
    Experiment.objects.filter(pk=experiment.pk).update(last_run=run)
    return run


def form_post(data: dict | None = None, **meta) -> dict:
    """What the browser posts from the form tab, for config ``data`` (default: the demo)."""
    data = data if data is not None else yaml.safe_load(DEMO_YAML)
    form = build_form(data)
    post = initial_post(form)
    post["base_yaml"] = form.base_yaml
    post["source"] = "form"
    post.update({f"experiment.{k}": v for k, v in {"name": "exp", **meta}.items()})
    return post


def yaml_post(text: str, **meta) -> dict:
    return {
        "source": "yaml",
        "config_yaml": text,
        **{f"experiment.{k}": v for k, v in {"name": "exp", **meta}.items()},
    }


def nothing_written():
    assert Experiment.objects.count() == 0 and ExperimentVersion.objects.count() == 0


# ---------------------------------------------------------------- list


def test_it_lists_only_the_users_own_experiments(alice_client, alice, bob):
    make(alice, "mine")
    make(bob, "theirs")
    page = alice_client.get("/experiments/")
    assert page.status_code == 200
    assert b"mine" in page.content and b"theirs" not in page.content


def test_staff_see_everyones_experiments_and_filter_by_owner(client, alice, bob, staff):
    make(alice, "a-exp")
    make(bob, "b-exp")
    client.force_login(staff)
    page = client.get("/experiments/").content.decode()
    assert (
        ">a-exp<" in page and ">b-exp<" in page
    )  # the link texts ("data-experiment" holds "a-exp")
    page = client.get("/experiments/?owner=bob").content.decode()
    assert ">b-exp<" in page and ">a-exp<" not in page


def test_it_searches_name_project_and_description(alice_client, alice):
    make(alice, "alpha", project="p1")
    make(alice, "beta", project="p2", description="the needle is here")
    assert b"beta" in alice_client.get("/experiments/?q=needle").content
    assert b"alpha" not in alice_client.get("/experiments/?q=needle").content
    page = alice_client.get("/experiments/?project=p1").content.decode()
    assert "alpha" in page and ">beta<" not in page


def test_it_filters_by_tag_and_last_run_status(alice_client, alice):
    tagged = make(alice, "tagged", tags=["x", "y"])
    make(alice, "never")
    add_run(tagged, status=RunStatus.FAILED)
    page = alice_client.get("/experiments/?tag=x").content.decode()
    assert "tagged" in page and ">never<" not in page
    page = alice_client.get("/experiments/?status=failed").content.decode()
    assert "tagged" in page and ">never<" not in page
    page = alice_client.get("/experiments/?status=never").content.decode()
    assert ">never<" in page and ">tagged<" not in page


def test_it_shows_the_last_runs_status_and_accuracies_and_sorts_by_best(alice_client, alice):
    low, high = make(alice, "low"), make(alice, "high")
    add_run(low, last=0.1, best=0.25)
    add_run(high, last=0.5, best=0.75)
    page = alice_client.get("/experiments/?sort=accuracy").content.decode()
    assert "0.750" in page and "0.500" in page and "succeeded" in page
    assert page.index(">high<") < page.index(">low<")
    page = alice_client.get("/experiments/?sort=name").content.decode()
    assert page.index(">high<") < page.index(">low<")


def test_it_pages_the_list(alice_client, alice):
    for i in range(30):
        Experiment.objects.create(owner=alice, name=f"e{i:02d}", config_yaml="{}\n")
    first = alice_client.get("/experiments/?sort=name").content.decode()
    second = alice_client.get("/experiments/?sort=name&page=2").content.decode()
    assert ">e00<" in first and ">e24<" in first and ">e25<" not in first
    assert ">e25<" in second and "page 2 of 2 (30 experiments)" in second


def _list_queries(client) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/experiments/").status_code == 200
    return len(ctx.captured_queries)


def test_the_list_query_count_does_not_grow_with_rows(alice_client, alice):
    def seed(n):
        for i in range(n):
            e = Experiment.objects.create(owner=alice, name=f"q{n}-{i}", config_yaml="{}\n")
            add_run(e, last=0.5, best=0.5)
            e.tags.add(Tag.objects.get_or_create(name=f"tag{i % 3}")[0])

    seed(5)
    few = _list_queries(alice_client)
    seed(45)
    many = _list_queries(alice_client)
    assert few == many, f"{few} queries for 5 rows, {many} for 25 of 50"


def test_anonymous_users_are_sent_to_login(client):
    response = client.get("/experiments/")
    assert response.status_code == 302 and response.url.startswith("/login/")


# ---------------------------------------------------------------- create


def test_it_creates_an_experiment_from_the_form(alice_client, alice):
    response = alice_client.post("/experiments/new/", form_post(name="demo run", tags="a, b"))
    assert response.status_code == 302, response.content.decode()[:2000]
    e = Experiment.objects.get()
    assert response.url == f"/experiments/{e.pk}/"
    assert (e.owner, e.name, e.version, e.project) == (alice, "demo run", 1, "demo")
    assert sorted(t.name for t in e.tags.all()) == ["a", "b"]
    assert e.config["model"]["model_path"] == "${oc.env:RFT_DEMO_DIR,./var/demo}/model"
    assert e.versions.get().number == 1
    event = AuditEvent.objects.get(action="experiment.create")
    assert (event.actor_id, event.target_id) == (alice.pk, str(e.pk))


def test_a_changed_form_field_is_saved(alice_client):
    post = form_post()
    post["buffer.total_steps"] = "3"
    assert alice_client.post("/experiments/new/", post).status_code == 302
    assert Experiment.objects.get().config["buffer"]["total_steps"] == 3


def test_a_form_with_many_stages_and_their_tasksets_is_saved(alice_client):
    """Each stage posts ~160 fields and each of its eval tasksets ~36: six stages pass Django's
    default cap of 1000 posted fields, which answered a bare 400."""
    data = yaml.safe_load(DEMO_YAML)
    sft, rft = data["stages"]
    eval_taskset = data["buffer"]["explorer_input"]["eval_tasksets"][0]
    data["stages"] = [{**sft, "stage_name": f"sft_{i}"} for i in range(3)] + [
        {**rft, "stage_name": f"rft_{i}", "buffer": {**data["buffer"]}} for i in range(3)
    ]
    data["stages"][-1]["buffer"]["explorer_input"] = {
        **data["buffer"]["explorer_input"],
        "eval_tasksets": [eval_taskset, {**eval_taskset, "name": "again"}],
    }
    post = form_post(data)
    assert len(post) > 1000
    post["stages[5].buffer.explorer_input.eval_tasksets[1].repeat_times"] = "2"
    assert alice_client.post("/experiments/new/", post).status_code == 302
    saved = Experiment.objects.get().config["stages"]
    assert [s["stage_name"] for s in saved] == [
        *(f"sft_{i}" for i in range(3)),
        *(f"rft_{i}" for i in range(3)),
    ]
    assert saved[5]["buffer"]["explorer_input"]["eval_tasksets"][1]["repeat_times"] == 2


def test_it_creates_an_experiment_from_the_yaml_tab_and_an_upload(alice_client):
    assert alice_client.post("/experiments/new/", yaml_post(DEMO_YAML)).status_code == 302
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("x.yaml", DEMO_YAML.encode(), content_type="text/yaml")
    post = {**yaml_post("ignored: [", name="uploaded"), "config_file": upload}
    assert alice_client.post("/experiments/new/", post).status_code == 302
    assert Experiment.objects.count() == 2


def test_the_new_page_starts_from_the_demo_config_with_beginner_and_expert_fields(alice_client):
    page = alice_client.get("/experiments/new/").content.decode()
    assert 'name="model.model_path"' in page and "${oc.env:RFT_DEMO_DIR,./var/demo}/model" in page
    assert 'name="buffer.explorer_input.eval_tasksets[0].name"' in page
    assert 'data-level="expert"' in page and 'id="expert-switch"' in page
    assert 'name="stages[0].buffer"' in page and "js/experiments.js" in page


BAD_INPUT = [
    ("invalid YAML", yaml_post("model: [unclosed\n"), "is not valid YAML", None),
    (
        "unknown key",
        yaml_post(DEMO_YAML.replace("  batch_size: 8\n", "  batch_sise: 8\n")),
        "did you mean &#x27;batch_size&#x27;?",
        None,
    ),
    (
        "wrong type",
        yaml_post(DEMO_YAML.replace("  batch_size: 8\n", "  batch_size: eight\n")),
        "must be an integer, got &#x27;eight&#x27; (str)",
        "buffer.batch_size",
    ),
    (
        "path /etc",
        yaml_post(DEMO_YAML.replace("${oc.env:RFT_DEMO_DIR,./var/demo}/model", "/etc")),
        "outside the allowed roots",
        "model.model_path",
    ),
    (
        "path ../../etc/passwd",
        yaml_post(DEMO_YAML.replace("${oc.env:RFT_DEMO_DIR,./var/demo}/model", "../../etc/passwd")),
        "outside the allowed roots",
        "model.model_path",
    ),
    (
        "forbidden oc.env",
        yaml_post(DEMO_YAML.replace("RFT_DEMO_DIR,./var/demo}/model", "SECRET_KEY,x}/model")),
        "reads the environment variable &#x27;SECRET_KEY&#x27;",
        "model.model_path",
    ),
    (
        "300 KB YAML",
        yaml_post(DEMO_YAML + "#" + "x" * 300 * 1024 + "\n"),
        "RFT_YAML_MAX_BYTES",
        None,
    ),
    (
        "alias bomb",
        yaml_post(
            "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"{n}: &{n} [{','.join(['*' + p] * 10)}]\n"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            )
        ),
        "aliases expand to more than 100 extra nodes",
        None,
    ),
    ("missing name", yaml_post(DEMO_YAML, name=""), "required: give a name", None),
]


@pytest.mark.parametrize(
    ("what", "post", "message", "field"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT]
)
def test_it_rejects_bad_input_with_400_and_writes_nothing(alice_client, what, post, message, field):
    response = alice_client.post("/experiments/new/", post)
    page = response.content.decode()
    assert response.status_code == 400, page[:1500]
    assert message in page
    if field is not None:
        block = re.search(
            rf'<div class="field[^"]*has-error"[^>]*>\s*<label for="f-{re.escape(field)}".*?</div>',
            page,
            re.S,
        )
        assert block is not None and message in block.group(0), f"no error beside {field}"
    nothing_written()
    assert not AuditEvent.objects.filter(action="experiment.create").exists()


def test_an_unknown_key_from_the_form_is_shown_beside_its_field(alice_client):
    data = yaml.safe_load(DEMO_YAML)
    data["buffer"]["explorer_input"]["eval_tasksets"][0]["formatt"] = {}
    response = alice_client.post("/experiments/new/", form_post(data))
    assert response.status_code == 400
    page = response.content.decode()
    field = "buffer.explorer_input.eval_tasksets[0].formatt"
    assert "unknown key &#x27;formatt&#x27; (did you mean &#x27;format&#x27;?)" in page
    assert field in page
    nothing_written()


def test_a_symlink_pointing_out_of_the_roots_is_refused(alice_client, tmp_path, settings):
    root = tmp_path / "models"
    root.mkdir()
    (root / "escape").symlink_to("/etc")
    settings.RFT_ALLOWED_PATH_ROOTS = [root, *django_settings.RFT_ALLOWED_PATH_ROOTS]
    text = DEMO_YAML.replace("${oc.env:RFT_DEMO_DIR,./var/demo}/model", str(root / "escape"))
    response = alice_client.post("/experiments/new/", yaml_post(text))
    assert response.status_code == 400
    assert "resolves to /etc, outside the allowed roots" in response.content.decode()
    nothing_written()


def test_a_duplicate_name_is_refused_and_nothing_more_is_written(alice_client, alice):
    make(alice, "exp")
    response = alice_client.post("/experiments/new/", yaml_post(DEMO_YAML, name="exp"))
    assert response.status_code == 400
    assert "you already have an experiment named &#x27;exp&#x27;" in response.content.decode()
    assert Experiment.objects.count() == 1 and ExperimentVersion.objects.count() == 1


def test_a_refused_form_keeps_what_the_user_typed(alice_client):
    post = form_post()
    post["buffer.batch_size"] = "-3"
    response = alice_client.post("/experiments/new/", post)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'name="buffer.batch_size" value="-3"' in page
    assert "buffer.batch_size: must be &gt;= 1, got -3" in page


# ---------------------------------------------------------------- edit, versions


def test_editing_the_config_adds_a_version_and_a_diff(alice_client, alice):
    e = make(alice)
    form = build_form(e.config)
    post = {**initial_post(form), "base_yaml": form.base_yaml, "source": "form"}
    post.update({"experiment.name": "exp", "experiment.project": "demo", "note": "shorter"})
    post["buffer.total_steps"] = "7"
    assert alice_client.post(f"/experiments/{e.pk}/edit/", post).status_code == 302
    e.refresh_from_db()
    assert e.version == 2 and e.config["buffer"]["total_steps"] == 7
    assert list(e.versions.values_list("number", "note")) == [(2, "shorter"), (1, "created")]
    diff = alice_client.get(f"/experiments/{e.pk}/versions/?a=1&b=2").content.decode()
    assert "-  total_steps: 30" in diff and "+  total_steps: 7" in diff
    assert AuditEvent.objects.filter(action="experiment.update", target_id=str(e.pk)).count() == 1


def test_saving_an_unchanged_config_adds_no_version(alice, alice_client):
    e = make(alice)
    actions.update_experiment(Actor(user=alice), e, config_yaml=e.config_yaml, description="d")
    e.refresh_from_db()
    assert e.version == 1 and e.versions.count() == 1 and e.description == "d"


def test_a_refused_edit_changes_nothing(alice, alice_client):
    e = make(alice)
    response = alice_client.post(
        f"/experiments/{e.pk}/edit/", yaml_post("model: {model_path: /etc}\n", name="renamed")
    )
    assert response.status_code == 400
    e.refresh_from_db()
    assert (e.name, e.version, e.versions.count()) == ("exp", 1, 1)


def test_another_users_experiment_is_forbidden(client, alice, bob):
    e = make(alice)
    client.force_login(bob)
    for url in ["", "edit/", "yaml/", "versions/"]:
        assert client.get(f"/experiments/{e.pk}/{url}").status_code == 403
    assert client.post(f"/experiments/{e.pk}/delete/").status_code == 403
    assert client.post(f"/experiments/{e.pk}/edit/", yaml_post(DEMO_YAML)).status_code == 403
    assert Experiment.objects.filter(pk=e.pk).exists()
    assert AuditEvent.objects.filter(action="permission.denied", actor_id=bob.pk).exists()
    assert client.get("/experiments/999999/").status_code == 404


# ---------------------------------------------------------------- detail, download, clone, delete


def test_the_detail_page_lists_runs_with_links_compare_and_launch(alice_client, alice):
    e = make(alice, description="about it", tags=["t1"])
    r1 = add_run(e, 1, RunStatus.FAILED, last=0.2, best=0.3)
    r2 = add_run(e, 2, RunStatus.RUNNING)
    page = alice_client.get(f"/experiments/{e.pk}/").content.decode()
    assert f'href="/runs/{r1.pk}/"' in page and f'href="/runs/{r2.pk}/"' in page
    assert "0.300" in page and "failed" in page and "running" in page
    assert f'action="/runs/launch/{e.pk}/"' in page and "csrfmiddlewaretoken" in page
    assert 'action="/runs/compare/"' in page and "about it" in page and "t1" in page


def test_it_downloads_the_canonical_yaml_as_an_attachment(alice_client, alice):
    e = make(alice, "my exp/1")
    response = alice_client.get(f"/experiments/{e.pk}/yaml/")
    assert response["Content-Disposition"] == 'attachment; filename="my_exp_1.yaml"'
    assert response.content.decode() == e.config_yaml
    assert yaml.safe_load(response.content) == e.config


def test_it_clones_an_experiment(alice_client, alice):
    e = make(alice, tags=["t"])
    response = alice_client.post(f"/experiments/{e.pk}/clone/")
    clone = Experiment.objects.exclude(pk=e.pk).get()
    assert response.status_code == 302 and response.url == f"/experiments/{clone.pk}/edit/"
    assert clone.name == "exp copy" and clone.config_yaml == e.config_yaml
    assert [t.name for t in clone.tags.all()] == ["t"]
    alice_client.post(f"/experiments/{e.pk}/clone/")
    assert Experiment.objects.filter(name="exp copy (2)").exists()
    assert AuditEvent.objects.filter(action="experiment.clone").count() == 2


def test_it_clones_a_runs_config_snapshot(alice, bob, staff):
    e = make(alice)
    run = add_run(e, 3)
    clone = actions.clone_run_config(Actor(user=alice), run)
    assert clone.name == "exp run 3" and clone.config == e.config
    event = AuditEvent.objects.get(action="run.clone")
    assert event.target_id == str(run.pk) and event.after["experiment"] == clone.pk
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        actions.clone_run_config(Actor(user=bob), run)
    staff_clone = actions.clone_run_config(Actor(user=staff), run)
    assert staff_clone.owner == staff


def test_it_deletes_an_experiment(alice_client, alice):
    e = make(alice)
    add_run(e, 1, RunStatus.SUCCEEDED)
    response = alice_client.post(f"/experiments/{e.pk}/delete/")
    assert response.status_code == 302 and response.url == "/experiments/"
    assert not Experiment.objects.exists() and not Run.objects.exists()
    assert AuditEvent.objects.get(action="experiment.delete").before["runs"] == 1


def test_it_refuses_to_delete_while_a_run_is_active(alice_client, alice):
    e = make(alice)
    add_run(e, 1, RunStatus.RUNNING)
    response = alice_client.post(f"/experiments/{e.pk}/delete/")
    assert response.status_code == 409
    assert "run #1 of &#x27;exp&#x27; is running; cancel it" in response.content.decode()
    assert Experiment.objects.filter(pk=e.pk).exists()
    with pytest.raises(ActionError) as err:
        actions.delete_experiment(Actor(user=alice), e)
    assert err.value.status == 409


# ---------------------------------------------------------------- the form's JS endpoint


def test_the_tab_switch_converts_form_to_yaml_and_yaml_to_form(alice_client):
    post = form_post()
    post["buffer.total_steps"] = "4"
    response = alice_client.post("/experiments/form/convert/", {**post, "to": "yaml"})
    text = response.json()["yaml"]
    assert yaml.safe_load(text)["buffer"]["total_steps"] == 4
    response = alice_client.post("/experiments/form/convert/", {"to": "form", "config_yaml": text})
    assert 'name="buffer.total_steps" value="4"' in response.json()["html"]
    bad = alice_client.post("/experiments/form/convert/", {"to": "form", "config_yaml": "[1"})
    assert bad.status_code == 400 and "not valid YAML" in bad.json()["detail"]
    nothing_written()


# ---------------------------------------------------------------- the demo experiment


def test_ensure_demo_experiment_gives_the_demo_user_a_launchable_experiment_once(tmp_path):
    call_command("ensure_demo_user", login_file=str(tmp_path / "login.txt"))
    call_command("ensure_demo_experiment")
    call_command("ensure_demo_experiment")
    demo = get_user_model().objects.get(username="demo")
    e = Experiment.objects.get(owner=demo)
    assert (e.name, e.version, e.versions.count()) == ("grpo_demo", 1, 1)
    from webapp.experiments.config_policy import check_config, parse_yaml

    assert e.config == parse_yaml(DEMO_YAML)

    assert check_config(config_yaml=e.config_yaml).config.stages[0].stage_name == "sft_warmup"
    assert AuditEvent.objects.filter(action="experiment.create", actor_name="system").count() == 1
