"""Whose job dir is whose (webapp/runs/claims.py), through every endpoint that takes one: the
API's import and register, the import page, and converting a checkpoint (API and page) of a run
whose job dir is the claim (a row as an import made before the claim rule leaves it).

The world: alice owns two runs, one in her runs area (<runs>/users/<alice id>/...) and one in
the team's shared root; bob, a member of the team (but not of other-team), claims paths:

    own area                      allowed
    another user's area           403 outside your runs area
    alice's job dir in the team's shared root         403 belongs to another user's run
    a parent / a child of alice's job dir there        403 belongs to another user's run
    a free dir in the team's root (bob a member)       allowed
    a dir in other-team's root (bob not a member)     403 outside your runs area
    a symlink in bob's area into alice's area          403 outside your runs area
    <bob's area>/../<alice id>/...                     403 outside your runs area
    outside RFT_ALLOWED_PATH_ROOTS                     403 outside the directories ...

and staff claims alice's own job dir: allowed, the action's audit row saying "staff". Every
refusal: the 403, the message naming the rule (beside the field on the page), one
``permission.denied`` audit row (actor, action, path), and nothing written (row counts, the
file tree, no conversion queued).
"""

from __future__ import annotations

import html
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from rft_core.checkpoint import layout
from tests.webapp.api_helpers import make_experiment, make_user, task_callbacks, token_client
from tests.webapp.job_dirs import CONFIG, write_job_dir
from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.claims import runs_area
from webapp.runs.models import MetricPoint, Run, RunOrigin, RunStatus

pytestmark = pytest.mark.django_db

OTHERS_RUN = "this job dir belongs to another user's run"
OUTSIDE_AREA = "this job dir is outside your runs area"
OUTSIDE_ROOTS = "this job dir is outside the directories this dashboard may read"


@dataclass
class World:
    runs: Path
    alice: object
    bob: object
    staff: object
    alice_job: Path  # her run's job dir in her runs area
    shared_job: Path  # her run's job dir in the team's shared root
    paths: dict[str, Path]


@pytest.fixture
def world(roots, settings, tmp_path) -> World:
    _, runs = roots
    alice, bob = make_user("alice"), make_user("bob")
    staff = make_user("root", staff=True)
    team = Group.objects.create(name="team")
    Group.objects.create(name="other-team")
    bob.groups.add(team)
    shared, other_shared = runs / "shared" / "team", runs / "shared" / "other"
    settings.RFT_SHARED_RUN_ROOTS = {"team": [str(shared)], "other-team": [str(other_shared)]}
    alice_area, bob_area = runs_area(alice), runs_area(bob)

    alice_job = alice_area / "checkpoints" / "run-1" / "demo" / "alice-run"
    shared_job = shared / "demo" / "alice-shared-run"
    experiment = make_experiment(alice, "alice-exp")
    for number, job in enumerate((alice_job, shared_job), start=1):
        write_job_dir(job)
        Run.objects.create(experiment=experiment, number=number, status=RunStatus.SUCCEEDED,
                           config_yaml="", job_dir=str(job))  # fmt: skip

    paths = {
        "own area": bob_area / "proj" / "bob-run",
        "another user's area": alice_area / "proj" / "unowned",
        "another user's run in a shared root": shared_job,
        "parent of another user's run": shared_job.parent,
        "child of another user's run": shared_job / "stage",
        "granted root, member": shared / "proj" / "bob-shared",
        "granted root, non-member": other_shared / "proj" / "x",
        "symlink into another user's area": bob_area / "proj" / "link",
        "dot-dot escape": Path(f"{bob_area}/../{alice.pk}/proj/unowned"),
        "outside the allowed roots": tmp_path / "elsewhere" / "proj" / "run",
        "staff: another user's run": alice_job,
    }
    for name, job in paths.items():
        if name in ("symlink into another user's area", "dot-dot escape") or job.is_dir():
            continue
        write_job_dir(job)
    paths["symlink into another user's area"].symlink_to(paths["another user's area"])
    return World(runs, alice, bob, staff, alice_job, shared_job, paths)


# case -> (who claims, expected: "ok" or the rule's words)
CASES = {
    "own area": ("bob", "ok"),
    "another user's area": ("bob", OUTSIDE_AREA),
    "another user's run in a shared root": ("bob", OTHERS_RUN),
    "parent of another user's run": ("bob", OTHERS_RUN),
    "child of another user's run": ("bob", OTHERS_RUN),
    "granted root, member": ("bob", "ok"),
    "granted root, non-member": ("bob", OUTSIDE_AREA),
    "symlink into another user's area": ("bob", OUTSIDE_AREA),
    "dot-dot escape": ("bob", OUTSIDE_AREA),
    "outside the allowed roots": ("bob", OUTSIDE_ROOTS),
    "staff: another user's run": ("staff", "ok"),
}


# ---------------------------------------------------------------- the endpoints


def _json(client: Client, url: str, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


def _page_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_import(user, path, checkpoint):
    answer = _json(token_client(user)[0], "/api/v1/runs/import/", {"job_dir": str(path)})
    return answer, (201,), "run.import"


def api_register(user, path, checkpoint):
    body = {"config_yaml": CONFIG, "job_dir": str(path)}
    answer = _json(token_client(user)[0], "/api/v1/runs/register/", body)
    return answer, (201,), "run.register"


def page_import(user, path, checkpoint):
    answer = _page_client(user).post("/runs/import/", {"job_dir": str(path)})
    return answer, (302,), "run.import"


def _checkpoint_claiming(user, path: Path) -> Checkpoint:
    """A checkpoint of ``user``'s imported run whose job dir is ``path``, as an import made
    before the claim rule left it (the run comes after alice's, so hers are earlier)."""
    experiment = make_experiment(user, f"{user.username}-imported")
    run = Run.objects.create(experiment=experiment, number=1, status=RunStatus.SUCCEEDED,
                             config_yaml="", job_dir=str(path), origin=RunOrigin.IMPORT)  # fmt: skip
    step = Path(path) / "global_step_2"
    return Checkpoint.objects.create(run=run, stage="", step=2, path=str(step))


def api_convert(user, path, checkpoint):
    answer = token_client(user)[0].post(f"/api/v1/checkpoints/{checkpoint.pk}/convert/")
    return answer, (202,), "checkpoint.convert"


def page_convert(user, path, checkpoint):
    answer = _page_client(user).post(f"/checkpoints/{checkpoint.pk}/convert/")
    return answer, (302,), "checkpoint.convert"


ENDPOINTS = {
    "api import": api_import,
    "api register": api_register,
    "page import": page_import,
    "api convert": api_convert,
    "page convert": page_convert,
}


# ---------------------------------------------------------------- what a refusal leaves


def tree(root: Path) -> dict[str, tuple]:
    """Every file and directory under ``root``: (kind, size, mtime_ns)."""
    found = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base) / name
            info = path.lstat()
            found[str(path)] = (path.is_symlink(), path.is_dir(), info.st_size, info.st_mtime_ns)
    return found


def counts() -> dict[str, int]:
    return {
        "experiments": Experiment.objects.count(),
        "runs": Run.objects.count(),
        "events": RunEvent.objects.count(),
        "metric points": MetricPoint.objects.count(),
        "checkpoints": Checkpoint.objects.count(),
        "converting": Checkpoint.objects.filter(hf_status=HFStatus.CONVERTING).count(),
    }


def _message(answer) -> str:
    if answer["Content-Type"].startswith("application/json"):
        body = answer.json()
        return body["detail"] + json.dumps(body["errors"])
    return html.unescape(answer.content.decode())


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("case", CASES)
def test_a_job_dir_is_claimed_only_by_a_user_who_may(
    world, endpoint, case, django_capture_on_commit_callbacks
):
    who, expected = CASES[case]
    user = world.staff if who == "staff" else world.bob
    path = world.paths[case]
    drive = ENDPOINTS[endpoint]
    convert = "convert" in endpoint
    checkpoint = None
    if convert:  # the checkpoint and its step dir, as the trainer left it, before the snapshot
        (Path(os.path.realpath(path)) / "global_step_2" / layout.ACTOR_DIR).mkdir(
            parents=True, exist_ok=True
        )
        checkpoint = _checkpoint_claiming(user, path)
    files = tree(world.runs)
    audit_before = AuditEvent.objects.count()
    before = counts()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        answer, ok, action = drive(user, path, checkpoint)
    if expected == "ok":
        assert answer.status_code in ok, answer.content[:2000]
        row = AuditEvent.objects.filter(action=action).latest("id")
        assert row.actor_name == user.username
        if who == "staff":  # a staff claim of another user's job dir is audited as such
            assert row.after["claim"].startswith("staff: another user's run owns it"), row.after
        return
    real = os.path.realpath(path)
    assert answer.status_code == 403, answer.content[:2000]
    assert expected in _message(answer), _message(answer)[:2000]
    if endpoint == "page import":  # beside the field
        assert f'<span class="field-error">{expected}' in _message(answer)
    new = AuditEvent.objects.order_by("id")[audit_before:]
    rows = [r for r in new if r.action != "auth.login"]  # the page client's sign-in
    assert [(r.action, r.actor_name) for r in rows] == [("permission.denied", "bob")]
    assert rows[0].after["attempted"] == action and rows[0].after["job_dir"] == real
    assert expected in rows[0].after["rule"]
    assert counts() == before
    assert tree(world.runs) == files
    assert task_callbacks(callbacks) == []


def test_a_run_the_dashboard_placed_keeps_converting_where_it_is(
    world, django_capture_on_commit_callbacks
):
    """A row from before the runs areas (<runs>/checkpoints/run-<id>/...) is its owner's still."""
    job = world.runs / "checkpoints" / "run-9" / "demo" / "old"
    (job / "global_step_2" / layout.ACTOR_DIR).mkdir(parents=True)
    experiment = make_experiment(world.bob, "old-layout")
    run = Run.objects.create(experiment=experiment, number=1, status=RunStatus.SUCCEEDED,
                             config_yaml="", job_dir=str(job))  # fmt: skip
    checkpoint = Checkpoint.objects.create(run=run, step=2, path=str(job / "global_step_2"))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        answer = token_client(world.bob)[0].post(f"/api/v1/checkpoints/{checkpoint.pk}/convert/")
    assert answer.status_code == 202, answer.content
    assert len(task_callbacks(callbacks)) == 1
    row = AuditEvent.objects.get(action="checkpoint.convert")
    assert row.after["claim"] == "placed by the dashboard"


def test_the_earlier_run_keeps_a_job_dir_two_runs_claim(world, django_capture_on_commit_callbacks):
    """A job dir bob imported before the claim rule (his run is later than alice's): alice
    converts its checkpoints, bob cannot."""
    bobs = _checkpoint_claiming(world.bob, world.alice_job)
    alices = Checkpoint.objects.create(
        run=Run.objects.get(job_dir=str(world.alice_job), experiment__owner=world.alice), step=2,
        path=str(world.alice_job / "global_step_2"),
    )  # fmt: skip
    (world.alice_job / "global_step_2" / layout.ACTOR_DIR).mkdir(parents=True, exist_ok=True)
    with django_capture_on_commit_callbacks(execute=False):
        refused = token_client(world.bob)[0].post(f"/api/v1/checkpoints/{bobs.pk}/convert/")
        allowed = token_client(world.alice)[0].post(f"/api/v1/checkpoints/{alices.pk}/convert/")
    assert refused.status_code == 403 and OTHERS_RUN in refused.json()["detail"]
    assert allowed.status_code == 202, allowed.content


def test_the_import_page_names_the_users_runs_area_and_granted_roots(world):
    page = _page_client(world.bob).get("/runs/import/").content.decode()
    assert f'<code id="runs-area">{runs_area(world.bob)}</code>' in page
    assert str(world.runs / "shared" / "team") in page
    assert str(world.runs / "shared" / "other") not in page


def test_the_runs_area_is_named_by_the_user_id_whatever_the_username(roots):
    odd = [make_user(name) for name in ("..", "a/b", "7", "users")]
    areas = [runs_area(user) for user in odd]
    assert [area.name for area in areas] == [str(user.pk) for user in odd]
    assert len(set(areas)) == len(areas)
    assert all(area.parent == roots[1] / "users" for area in areas)


# ---------------------------------------------------------------- a launch's paths

DEMO_YAML = (
    Path(__file__).resolve().parents[3] / "examples" / "demo" / "grpo_demo.yaml"
).read_text()
CHECKPOINT_ROOT = "checkpoint_root_dir: ${oc.env:TRINITY_CHECKPOINT_ROOT_DIR,./checkpoints}"
MODEL_PATH = "model_path: ${oc.env:RFT_DEMO_DIR,./var/demo}/model"


def _bobs_experiment(world, name: str, old: str, new: str) -> Experiment:
    """Bob's experiment saved through the API (its paths pass the allowed roots)."""
    assert old in DEMO_YAML, old
    body = {"name": name, "config_yaml": DEMO_YAML.replace(old, new)}
    answer = _json(token_client(world.bob)[0], "/api/v1/experiments/", body)
    assert answer.status_code == 201, answer.content
    return Experiment.objects.get(pk=answer.json()["id"])


LAUNCHES = {
    # case: (line replaced, its new text, the YAML path refused or None, the rule's words)
    "checkpoint root in another user's area": (
        CHECKPOINT_ROOT, "checkpoint_root_dir: {alice_area}/mine", "checkpoint_root_dir",
        "this checkpoint root is outside your runs area",
    ),
    "checkpoint root climbing with .. into another user's area": (
        CHECKPOINT_ROOT, "checkpoint_root_dir: {bob_area}/../{alice_id}/mine",
        "checkpoint_root_dir", "this checkpoint root is outside your runs area",
    ),
    "checkpoint root inside another user's run in a shared root": (
        CHECKPOINT_ROOT, "checkpoint_root_dir: {shared_job}/inside", "checkpoint_root_dir",
        "this checkpoint root belongs to another user's run",
    ),
    "model read from another user's area": (
        MODEL_PATH, "model_path: {alice_job}/global_step_2/actor/huggingface",
        "model.model_path", "is inside another user's runs area",
    ),
    "experience buffer written into another user's run": (
        "path: sqlite:///demo.db", "path: sqlite:///{shared_job}/buffer.db",
        "buffer.trainer_input.experience_buffer.path",
        "is inside the job dir of another user's run",
    ),
    "the default relative root": (CHECKPOINT_ROOT, CHECKPOINT_ROOT, None, None),
    "a shared root holding another user's run": (
        CHECKPOINT_ROOT, "checkpoint_root_dir: {shared}", None, None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("page", [False, True], ids=["api", "page"])
@pytest.mark.parametrize("case", LAUNCHES)
def test_a_launch_writes_and_reads_only_where_its_user_may(world, settings, case, page):
    from workers.services import free_port

    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"  # a launch that passes stops here
    old, new, where, words = LAUNCHES[case]
    values = {
        "alice_area": runs_area(world.alice), "bob_area": runs_area(world.bob),
        "alice_id": world.alice.pk, "alice_job": world.alice_job,
        "shared_job": world.shared_job, "shared": world.shared_job.parents[1],
    }  # fmt: skip
    for name, value in values.items():
        new = new.replace(f"{{{name}}}", str(value))
    experiment = _bobs_experiment(world, "launched", old, new)
    files, audit_before, runs_before = tree(world.runs), AuditEvent.objects.count(), counts()
    if page:
        answer = _page_client(world.bob).post(f"/runs/launch/{experiment.pk}/")
    else:
        answer = token_client(world.bob)[0].post(f"/api/v1/experiments/{experiment.pk}/launch/")
    rows = [r for r in AuditEvent.objects.order_by("id")[audit_before:] if r.action != "auth.login"]
    assert counts() == runs_before and tree(world.runs) == files
    if where is None:  # the claim passed: the launch went on to ask Ray, which is down
        assert answer.status_code == 409 and settings.RAY_ADDRESS in _message(answer)
        assert rows == []
        return
    assert answer.status_code == 403, answer.content[:2000]
    assert words in _message(answer) and where in _message(answer)
    assert [(r.action, r.actor_name) for r in rows] == [("permission.denied", "bob")]
    assert rows[0].after["attempted"] == "run.launch" and words in rows[0].after["rule"]
    assert rows[0].target_type == "experiment" and rows[0].target_id == str(experiment.pk)


def test_a_queued_run_whose_root_another_user_took_fails_without_writing(world):
    """Between launch and start another user's run took the run's own dir: start_run says why
    and writes no launch config there."""
    from webapp.runs import actions

    shared = world.shared_job.parents[1]
    experiment = _bobs_experiment(world, "raced", CHECKPOINT_ROOT, f"checkpoint_root_dir: {shared}")
    run = Run.objects.create(experiment=experiment, number=1, config_yaml=experiment.config_yaml,
                             config=experiment.config, launched_by=world.bob)  # fmt: skip
    taken = shared / f"run-{run.pk}" / "demo" / "grpo_demo"
    claim = _json(token_client(world.alice)[0], "/api/v1/runs/register/",
                  {"config_yaml": CONFIG, "job_dir": str(taken)})  # fmt: skip
    assert claim.status_code == 403  # alice is no member of the team: her claim is refused too
    Run.objects.create(experiment=make_experiment(world.alice, "taker"), number=1,
                       config_yaml="", job_dir=str(taken))  # a row from before the rule  # fmt: skip
    actions.start_run(run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and OTHERS_RUN.replace("job dir", "run root") in (
        run.exit_reason
    )
    assert not (shared / f"run-{run.pk}" / "config.yaml").exists()


# ---------------------------------------------------------------- the setting


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{not json", "RFT_SHARED_RUN_ROOTS is not JSON"),
        ('["/a"]', "must be a JSON object"),
        ('{"team": "/a"}', "RFT_SHARED_RUN_ROOTS['team'] must be a non-empty list"),
        ('{"team": ["relative/root"]}', "'relative/root' is not an absolute path"),
    ],
)
def test_a_bad_shared_roots_setting_stops_start_up_with_one_line(value, words):
    import subprocess
    import sys

    env = {**os.environ, "RFT_SHARED_RUN_ROOTS": value, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    done = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[3], timeout=120)  # fmt: skip
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("RFT Studio settings: ") and words in line, done.stderr[-2000:]


def test_the_runs_that_took_a_job_dir_before_the_rule_are_listed(world):
    from django.core.management import CommandError, call_command

    out = io.StringIO()
    call_command("job_dir_conflicts", stdout=out)  # alice's runs: no conflict
    assert "no run holds" in out.getvalue()
    taken = _checkpoint_claiming(world.bob, world.alice_job / "sub").run  # a row from before
    with pytest.raises(CommandError, match="1 run"):
        call_command("job_dir_conflicts", stdout=out)
    assert (
        f"run {taken.pk} (bob, import) {world.alice_job / 'sub'}: owned by run " in out.getvalue()
    )


def test_a_save_does_not_tell_whether_a_path_in_another_users_area_exists(world):
    """A save refuses a model path that does not exist here (unless the user says it will on
    the cluster), but never for a path in another user's runs area: bob could otherwise probe
    alice's files by saving. Both saves answer the same; the launch refuses both."""
    answers = []
    for i, path in enumerate([world.alice_job, world.alice_job / "no-such-dir"]):
        body = {
            "name": f"probe-{i}",
            "config_yaml": DEMO_YAML.replace(MODEL_PATH, f"model_path: {path}"),
        }
        answer = _json(token_client(world.bob)[0], "/api/v1/experiments/", body)
        answers.append((answer.status_code, "missing_paths" in answer.json()))
    assert world.alice_job.is_dir()
    assert answers == [(201, False), (201, False)]
