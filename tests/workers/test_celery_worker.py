"""Celery tasks executed by a real worker process over the real Redis broker."""

from __future__ import annotations

from workers.diagnostics import add, database_name, ping


def test_a_real_worker_executes_a_task_and_returns_its_result(celery_worker_queue):
    result = add.apply_async((2.5, 4), queue=celery_worker_queue)
    assert result.get(timeout=60) == 6.5
    assert result.status == "SUCCESS"


def test_the_worker_runs_in_another_process(celery_worker_queue):
    import os

    reply = ping.apply_async(queue=celery_worker_queue).get(timeout=60)
    assert reply["pong"] is True
    assert reply["pid"] != os.getpid()


def test_health_reports_celery_up_while_a_worker_runs(celery_worker_queue, unique_id):
    from webapp.health.checks import check_celery

    status = check_celery()
    assert status.up is True
    assert unique_id in status.detail


def test_the_worker_uses_the_test_database(celery_worker_queue):
    from django.db import connection

    assert (
        database_name.apply_async(queue=celery_worker_queue).get(timeout=60)
        == connection.settings_dict["NAME"]
    )
