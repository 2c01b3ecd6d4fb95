"""Property-based tests of the JSON API (hypothesis): random and malformed JSON bodies to create,
update and launch, as a signed-in user with an API token. Whatever arrives, the answer is never
a 5xx, and a rejected request writes no row (Experiment, ExperimentVersion, Tag, Run, and no
audit row other than a permission denial).

Derandomized (reproducible in CI) and modest in examples: the suite runs on two shared cores.
"""

from __future__ import annotations

import json

import pytest
from api_helpers import make_experiment, token_client
from fuzz_strategies import (
    BILLION_LAUGHS,
    DEMO,
    DEMO_YAML,
    FUZZ,
    create_bodies,
    json_values,
    row_counts,
    update_bodies,
    yaml_texts,
)
from hypothesis import event, example, given
from hypothesis import strategies as st

from webapp.experiments.models import Experiment

pytestmark = pytest.mark.django_db


def assert_clean_refusal(response, before: dict[str, int], body) -> None:
    event(f"status {response.status_code}")  # --hypothesis-show-statistics
    if response.status_code >= 400 and response["Content-Type"] == "application/json":
        event(f"errors at {sorted(response.json().get('errors', {}))[:1]}")
    assert response.status_code < 500, (response.status_code, body)
    if response.status_code >= 400:
        assert row_counts() == before, (response.status_code, response.content[:500], body)
        payload = response.json()
        assert isinstance(payload["detail"], str) and payload["detail"], payload
        assert isinstance(payload["errors"], dict), payload


def send(client, method: str, url: str, body):
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.generic(method, url, data=raw, content_type="application/json")


@pytest.fixture
def api(alice):
    return token_client(alice)[0]


@FUZZ
@given(body=create_bodies)
@example(body={"name": "inf", "config_yaml": DEMO_YAML.replace("lr: 3e-5", "lr: 1.0e999")})
@example(
    body={"name": "nan", "config_yaml": DEMO_YAML.replace("temperature: 1.0", "temperature: .nan")}
)
@example(body={"name": "bomb", "config_yaml": BILLION_LAUGHS})
def test_it_never_fails_or_half_writes_on_random_create_payloads(api, body):
    before = row_counts()
    assert_clean_refusal(send(api, "POST", "/api/v1/experiments/", body), before, body)


@FUZZ
@given(body=update_bodies)
def test_it_never_fails_or_half_writes_on_random_update_payloads(alice, api, body):
    experiment = Experiment.objects.filter(owner=alice, name="fuzz-target").first()
    if experiment is None:
        experiment = make_experiment(alice, "fuzz-target")
        Experiment.objects.filter(pk=experiment.pk).update(config_yaml=DEMO_YAML, config=DEMO)
    before = row_counts()
    response = send(api, "PATCH", f"/api/v1/experiments/{experiment.pk}/", body)
    assert_clean_refusal(response, before, body)


@FUZZ
@given(config_yaml=yaml_texts, body=json_values)
def test_it_never_fails_or_half_writes_launching_a_stored_bad_config(alice, api, config_yaml, body):
    """An experiment whose stored config went bad (edited below the app, or older rules) is
    refused at launch with the config's errors, and no Run row is left behind."""
    experiment = Experiment.objects.filter(owner=alice, name="launch-target").first()
    if experiment is None:
        experiment = make_experiment(alice, "launch-target")
    Experiment.objects.filter(pk=experiment.pk).update(config_yaml=config_yaml)
    before = row_counts()
    response = send(api, "POST", f"/api/v1/experiments/{experiment.pk}/launch/", body)
    assert_clean_refusal(response, before, body)


@FUZZ
@given(body=st.one_of(json_values, st.binary(max_size=200)), path=st.sampled_from(
    ["experiments/", "experiments/{e}/", "experiments/{e}/launch/", "runs/{r}/cancel/"]
))  # fmt: skip
def test_it_answers_bytes_that_are_not_json_with_a_4xx(alice, api, body, path):
    experiment = make_experiment(alice, f"bytes-{Experiment.objects.count()}")
    url = "/api/v1/" + path.format(e=experiment.pk, r=999999)
    before = row_counts()
    raw = body if isinstance(body, bytes) else json.dumps(body)[:-1]  # JSON cut short
    response = api.generic("POST", url, data=raw, content_type="application/json")
    assert_clean_refusal(response, before, body)
