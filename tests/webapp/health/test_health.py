"""The health page reports each service up or down with the reason, against real services:
the test database, the test Redis, a Celery worker, a Ray head, and closed ports standing in
for stopped services. The reasons (addresses, paths, hostnames, versions) are for staff only:
anonymous visitors and other users see up or down."""

from __future__ import annotations

import pytest

from workers.services import free_port

pytestmark = pytest.mark.django_db


def _services(client) -> dict:
    return client.get("/health.json").json()["services"]


@pytest.fixture
def client(admin_client):
    """The reasons these tests look at are shown to staff: a staff user's client."""
    return admin_client


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


@pytest.fixture
def slow_job_server():
    """A stand-in for Ray's job server that answers /api/version after 2.5 s (a loaded head)."""
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(2.5)
            body = json.dumps({"ray_version": "2.99.0"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_ray_check_waits_rft_ping_timeout_s_for_a_slow_head(client, settings, slow_job_server):
    settings.RAY_ADDRESS = slow_job_server
    # the test session's patience (tests/conftest.py) outlasts the 2.5 s: up
    assert settings.RFT_PING_TIMEOUT_S == 10.0
    ray_status = _services(client)["ray"]
    assert ray_status["up"] is True, ray_status
    assert ray_status["detail"] == f"ray 2.99.0 job server at {slow_job_server}"
    # a user's shorter setting gives up first: down, with the reason
    settings.RFT_PING_TIMEOUT_S = 0.5
    ray_status = _services(client)["ray"]
    assert ray_status["up"] is False
    assert "timed out" in ray_status["detail"]


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


# ------------------------------------------------------------------ what each visitor sees


@pytest.fixture
def secrets(settings, redis_url, ray_head, celery_worker_queue, unique_id) -> list[str]:
    """The real configured values the page must keep from non-staff visitors: the database
    path, the Redis URL and its server's version, the Ray address and version, a Celery
    worker's name (with this machine's hostname)."""
    import socket

    import ray
    import redis as redis_lib

    settings.REDIS_URL = redis_url
    settings.RAY_ADDRESS = ray_head.address
    # the ping waits all of this for replies: long enough for a worker on a loaded machine
    settings.RFT_CELERY_PING_TIMEOUT_S = 3.0
    client = redis_lib.Redis.from_url(redis_url)
    version = client.info("server")["redis_version"]
    client.close()
    return [
        str(settings.DATABASES["default"]["NAME"]),
        redis_url,
        f"redis {version}",
        ray_head.address,
        f"ray {ray.__version__}",
        f"{unique_id}@{socket.gethostname()}",
    ]


def _seen(http) -> str:
    return http.get("/health/").content.decode() + http.get("/health.json").content.decode()


@pytest.mark.django_db(transaction=True)
def test_anonymous_visitors_and_other_users_see_up_or_down_only(
    secrets, admin_client, django_user_model
):
    from django.test import Client

    staff_view = _seen(admin_client)
    for value in secrets:
        assert value in staff_view  # the values are real: staff sees every one
    anonymous = Client()
    user = Client()
    user.force_login(django_user_model.objects.create_user("plain", password="x-long-pass-1"))
    for who, http in (("anonymous", anonymous), ("a non-staff user", user)):
        seen = _seen(http)
        leaked = [value for value in secrets if value in seen]
        assert leaked == [], f"{who} sees {leaked}"
        body = http.get("/health.json").json()
        assert body["services"] == {
            name: {"up": True} for name in ("database", "redis", "celery", "ray")
        }
        assert body["supervisor"] == {"in_use": False, "up": True, "processes": {}}
        page = http.get("/health/").content.decode()
        assert 'id="service-celery" data-up="true"' in page
        assert "<th>Detail</th>" not in page


def test_without_supervisord_the_page_says_the_supervisor_is_not_in_use(client, monkeypatch):
    monkeypatch.delenv("SUPERVISOR_SERVER_URL", raising=False)
    body = client.get("/health.json").json()
    assert body["supervisor"]["in_use"] is False
    assert "not in use" in body["supervisor"]["detail"]
    page = client.get("/health/").content.decode()
    assert "The supervisor is not in use" in page
    assert 'id="supervisor" data-in-use="false"' in page


def test_a_supervisord_that_does_not_answer_is_down_not_an_error(client, monkeypatch, tmp_path):
    monkeypatch.setenv("SUPERVISOR_SERVER_URL", f"unix://{tmp_path}/nobody.sock")
    response = client.get("/health.json")
    assert response.status_code == 503
    supervisor = response.json()["supervisor"]
    assert supervisor["in_use"] is True and supervisor["up"] is False
    assert "supervisord does not answer" in supervisor["detail"]
