"""Property-based tests of the experiment pages (hypothesis), as a signed-in user in a browser-
like client (CSRF enforced): the new and edit forms are fetched, then posted back with random
fields changed (random text, YAML path-looking names, list indices, huge and malformed values)
and random YAML pasted into the YAML tab. Never a 5xx; a rejected post (a 4xx, or the form shown
again with its errors) writes no row (Experiment, ExperimentVersion, Tag, Run, audit rows other
than a permission denial).

The posted field names are read from the rendered form, so the test follows the form as it
grows. Derandomized and modest in examples: the suite runs on two shared cores.
"""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

import pytest
import yaml
from django.test import Client
from fuzz_strategies import (
    DEMO_YAML,
    FUZZ,
    not_a_number,
    numeric_form_fields,
    row_counts,
    valid_form_changes,
    yaml_texts,
)
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from webapp.experiments.models import Experiment, ExperimentVersion

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _demo_paths_exist(roots):
    """The demo config's model and data directories exist (a save refuses paths that do not)."""


FORM_FUZZ = hsettings(FUZZ, max_examples=12)  # a form post renders the whole form again


class FormFields(HTMLParser):
    """The name -> value pairs a browser would post from the page's experiment form."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._textarea: str | None = None
        self._select: str | None = None
        self._templates = 0  # inside a list's empty item (<template>), which a browser never posts

    def handle_starttag(self, tag, attrs) -> None:
        a = dict(attrs)
        name = a.get("name")
        if tag == "template":
            self._templates += 1
        if self._templates:
            return
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.fields[name] = a.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields[name] = ""
        elif tag == "select" and name:
            self._select = name
            self.fields.setdefault(name, "")
        elif tag == "option" and self._select and "selected" in a:
            self.fields[self._select] = a.get("value", "")

    def handle_endtag(self, tag) -> None:
        if tag == "template":
            self._templates -= 1
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None

    def handle_data(self, data) -> None:
        if self._textarea:
            self.fields[self._textarea] += data


_FIELDS: dict[tuple[int, str], dict[str, str]] = {}


def form_fields(client: Client, url: str) -> dict[str, str]:
    """The form's fields, read once per client and page (the CSRF token stays valid)."""
    key = (id(client), url)
    if key not in _FIELDS:
        _FIELDS[key] = _read_form(client, url)
    return dict(_FIELDS[key])


def _read_form(client: Client, url: str) -> dict[str, str]:
    response = client.get(url)
    assert response.status_code == 200, url
    parser = FormFields()
    parser.feed(response.content.decode())
    assert "csrfmiddlewaretoken" in parser.fields, f"{url} has no CSRF-protected form"
    return parser.fields


nasty_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        ["", " ", "-1", "0", "nan", "1e999", "true", "null", "[1, 2", "{a: b}", "${oc.env:SECRET_KEY}",
         "/etc/passwd", "../../..", "x" * 5000, "\x00", "&a [1]", "*a", "!!python/name:os.system"]
    ),
)  # fmt: skip
field_names = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["buffer.batch_size", "buffer.explorer_input.eval_tasksets[7].name", "stages[99].mode",
         "stages[0].__origin__", "stages[-1].buffer", "model..model_path", "[0]", "__origin__",
         "config_yaml", "name", "tags", "project", "a" * 300]
    ),
)  # fmt: skip


@pytest.fixture
def browser(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


def _edit_target(alice) -> Experiment:
    experiment = Experiment.objects.filter(owner=alice, name="form-fuzz-target").first()
    if experiment is None:
        experiment = Experiment.objects.create(
            owner=alice,
            name="form-fuzz-target",
            config_yaml=DEMO_YAML,
            config=yaml.safe_load(DEMO_YAML),
        )
    return experiment


def assert_clean(response, before: dict[str, int], post: dict) -> None:
    assert response.status_code < 500, (response.status_code, post)
    rejected = response.status_code >= 400 or response.status_code == 200  # 200: form re-shown
    if rejected:
        assert row_counts() == before, (response.status_code, response.content[:400], post)


def _mutate(fields: dict[str, str], draw_changes: dict[str, str], keep: set[str]) -> dict[str, str]:
    post = {k: v for k, v in fields.items() if k in keep or k == "csrfmiddlewaretoken"}
    post.update(draw_changes)
    return post


@st.composite
def form_changes(draw, names: list[str]):
    changes = {}
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(names)) if names and draw(st.booleans()) else draw(field_names)
        changes[name] = draw(nasty_text)
    return changes


@FORM_FUZZ
@given(data=st.data())
def test_it_never_fails_or_half_writes_on_random_new_experiment_forms(browser, data):
    fields = form_fields(browser, "/experiments/new/")
    names = sorted(k for k in fields if k != "csrfmiddlewaretoken")
    whole = data.draw(st.booleans())  # the whole form, or a random part of it
    keep = set(names) if whole or not names else data.draw(st.sets(st.sampled_from(names)))
    changes = data.draw(form_changes(names))
    changes.pop("csrfmiddlewaretoken", None)
    post = _mutate(fields, changes, keep)
    before = row_counts()
    assert_clean(browser.post("/experiments/new/", post), before, post)


@FORM_FUZZ
@given(data=st.data())
def test_it_never_fails_or_half_writes_on_random_edit_forms(alice, browser, data):
    experiment = _edit_target(alice)
    url = f"/experiments/{experiment.pk}/edit/"
    fields = form_fields(browser, url)
    names = sorted(k for k in fields if k != "csrfmiddlewaretoken")
    changes = data.draw(form_changes(names))
    changes.pop("csrfmiddlewaretoken", None)
    post = _mutate(fields, changes, set(names))
    before = row_counts()
    assert_clean(browser.post(url, post), before, post)


@FORM_FUZZ
@given(text=yaml_texts, page=st.sampled_from(["new", "edit"]))
def test_it_never_fails_or_half_writes_on_random_pasted_yaml(alice, browser, text, page):
    url = "/experiments/new/" if page == "new" else f"/experiments/{_edit_target(alice).pk}/edit/"
    fields = form_fields(browser, url)
    yaml_field = next((k for k in fields if k.endswith("config_yaml") or k == "yaml"), None)
    assert yaml_field, f"no YAML field on {url}: {sorted(fields)[:20]}"
    post = {**fields, yaml_field: text}
    if "name" in fields and page == "new":
        post["name"] = "pasted"
    before = row_counts()
    assert_clean(browser.post(url, post), before, post[yaml_field][:200])


def test_it_refuses_a_form_post_without_the_csrf_token(browser):
    before = row_counts()
    response = browser.post("/experiments/new/", {"name": "x", "config_yaml": DEMO_YAML})
    assert response.status_code == 403
    assert row_counts() == before


def test_it_refuses_a_non_finite_number_in_a_form_field(alice, browser):
    """Found by the edit-form fuzz: ``1e999`` parses as inf, which no JSON column stores."""
    experiment = _edit_target(alice)
    url = f"/experiments/{experiment.pk}/edit/"
    fields = form_fields(browser, url)
    number_field = "algorithm.optimizer.lr"
    before = row_counts()
    response = browser.post(url, {**fields, number_field: "1e999"})
    assert 400 <= response.status_code < 500
    assert "not a finite number" in response.content.decode()  # beside the field, by its path
    assert row_counts() == before
    assert Experiment.objects.get(pk=experiment.pk).version == experiment.version


# ---------------------------------------------------------------- the accept path
MIXED_FUZZ = hsettings(FUZZ, max_examples=12)


def _field_error_beside(html: str, name: str) -> bool:
    """The form shows an error in the box of field ``name`` (``_field.html``)."""
    box = re.search(
        r'<div class="field kind-\w+ has-error"[^>]*>\s*<label for="f-' + re.escape(name) + r'"'
        r'.*?<p class="error field-error">',
        html,
        re.S,
    )
    return box is not None


def test_valid_posts_create_one_experiment_and_invalid_ones_none(browser, alice):
    """Two posts in three are the form as a user fills it well (a name, tags, numbers varied
    within a factor of two of the demo's): each accepted one creates exactly one experiment and
    one version, and at least a third of them are accepted, so the accept path is exercised.
    The third breaks one number field: refused with a 4xx, the error in that field's box,
    no row written. Never a 5xx."""
    numeric = numeric_form_fields()
    assert len(numeric) >= 5, f"the demo form has few number fields: {sorted(numeric)}"
    fields = form_fields(browser, "/experiments/new/")
    tally: Counter[str] = Counter()
    refused_valid: list[tuple[dict, list[str]]] = []

    @MIXED_FUZZ
    @given(data=st.data())
    def post_one(data):
        changes = data.draw(valid_form_changes(numeric))
        changes["experiment.name"] += f" #{sum(tally.values())}"  # unique among alice's
        valid = sum(tally.values()) % 3 != 2  # two valid posts to one broken, whatever is drawn
        broken = None
        if not valid:
            broken = data.draw(st.sampled_from(sorted(numeric)))
            changes[broken] = data.draw(not_a_number)
        post = {**fields, **changes, "source": "form"}
        before = row_counts()
        response = browser.post("/experiments/new/", post)
        assert response.status_code < 500, (response.status_code, changes)
        after = row_counts()
        if response.status_code == 302:
            assert valid, f"a post with {broken}={changes[broken]!r} was accepted"
            tally["valid accepted"] += 1
            assert after["experiments"] == before["experiments"] + 1, changes
            assert after["versions"] == before["versions"] + 1, changes
            experiment = Experiment.objects.get(owner=alice, name=changes["experiment.name"])
            assert ExperimentVersion.objects.filter(experiment=experiment).count() == 1
            assert response["Location"] == experiment.get_absolute_url()
        else:
            tally["valid refused" if valid else "invalid refused"] += 1
            if valid:  # a valid-looking post the checks refuse: shown in the summary line
                errors = re.findall(
                    r'class="error field-error">([^<]*)<', response.content.decode()
                )
                refused_valid.append((changes, errors[:3]))
            assert 400 <= response.status_code < 500, (response.status_code, changes)
            assert after == before, (changes, before, after)
            html = response.content.decode()
            if broken is not None:
                assert _field_error_beside(html, broken), f"no error beside {broken}: {changes}"
            else:
                assert "field-error" in html or 'role="alert"' in html, changes

    post_one()
    print(f"form fuzz: {dict(tally)}; valid posts refused: {refused_valid}")
    valid_posts = tally["valid accepted"] + tally["valid refused"]
    assert valid_posts >= 6 and tally["invalid refused"] >= 3, dict(tally)
    assert tally["valid accepted"] * 3 >= valid_posts, f"too few valid posts accepted: {tally}"


@pytest.mark.parametrize(
    ("field", "where"),
    [
        ("experiment.description", 'id="experiment-description"'),
        ("experiment.project", 'id="experiment-project"'),
        ("experiment.name", 'id="experiment-name"'),
        # the config's project (a path of the job dir) is the experiment's Project in the form
    ],
)
def test_it_refuses_a_nul_character_in_a_text_field(browser, field, where):
    """Found by the valid-post fuzz on PostgreSQL: a description with a NUL (\\x00) was a 500
    (PostgreSQL text cannot hold one); in the config's project a ValueError from the path
    check, a 500 on any database."""
    fields = form_fields(browser, "/experiments/new/")
    post = {**fields, "experiment.name": "nul-test", "source": "form"}
    post[field] = post[field] + "a\x00b" if field != "experiment.name" else "nul\x00test"
    before = row_counts()
    response = browser.post("/experiments/new/", post)
    assert response.status_code == 400, response.status_code
    html = response.content.decode()
    assert "NUL character" in html
    box = html[html.index(where) - 200 :]
    assert "has-error" in box[:300] and "field-error" in box[:1500], box[:1500]
    assert row_counts() == before
