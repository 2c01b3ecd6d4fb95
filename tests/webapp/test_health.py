"""The health page reports each service up or down with the reason, against real services:
the test database, the test Redis, and closed ports standing in for stopped services."""

from __future__ import annotations

import pytest

from workers.services import free_port

pytestmark = pytest.mark.django_db


def _services(client) -> dict:
    return client.get("/health.json").json()["services"]


def test_it_reports_database_and_redis_up(client, settings, redis_url):
    settings.REDIS_URL = redis_url
    services = _services(client)
    assert services["database"]["up"] is True
    assert services["redis"]["up"] is True
    assert services["redis"]["detail"].startswith("redis ")


def test_it_reports_a_stopped_redis_as_down_with_how_to_start_it(client, settings):
    port = free_port()
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/health.json")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    redis_status = body["services"]["redis"]
    assert redis_status["up"] is False
    assert f"127.0.0.1:{port}" in redis_status["detail"]
    assert "REDIS_URL" in redis_status["detail"]
    assert body["services"]["celery"]["up"] is False
    assert "broker" in body["services"]["celery"]["detail"]


def test_it_reports_a_stopped_ray_as_down(client, settings):
    port = free_port()
    settings.RAY_ADDRESS = f"http://127.0.0.1:{port}"
    ray_status = _services(client)["ray"]
    assert ray_status["up"] is False
    assert f"127.0.0.1:{port}" in ray_status["detail"]
    assert "ray start --head" in ray_status["detail"]


def test_it_checks_a_gcs_style_ray_address_by_tcp(client, settings):
    port = free_port()
    settings.RAY_ADDRESS = f"127.0.0.1:{port}"
    assert _services(client)["ray"]["up"] is False


def test_it_reports_no_celery_worker_as_down(client, settings, redis_url, unique_id):
    # No worker consumes this broker database (claimed, so no e2e stack's worker is on it): the
    # ping gets no reply within the timeout.
    from redis_claim import claim_db, release

    from workers.celery_app import app

    settings.REDIS_URL = redis_url
    empty = claim_db(redis_url, unique_id)
    app.conf.broker_url = empty
    try:
        celery_status = _services(client)["celery"]
    finally:
        app.conf.broker_url = redis_url
        release(empty)
    assert celery_status["up"] is False
    assert "no worker answered" in celery_status["detail"]


def test_the_html_page_marks_each_service(client, settings):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    page = client.get("/health/")
    assert page.status_code == 503
    html = page.content.decode()
    for name in ("database", "redis", "celery", "ray"):
        assert f'id="service-{name}"' in html
    assert 'id="service-ray" data-up="false"' in html
    assert 'id="service-database" data-up="true"' in html
