"""``ensure_demo_user`` writes the address the stack really serves on into the login file, and
brings it up to date when the stack moves to another port (the password stays)."""

from __future__ import annotations

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def _fields(path):
    return dict(line.split(": ", 1) for line in path.read_text().splitlines())


def test_the_login_file_names_the_port_the_stack_runs_on(tmp_path, monkeypatch):
    login = tmp_path / "demo_login.txt"
    monkeypatch.setenv("RFT_WEB_PORT", "8123")
    call_command("ensure_demo_user", login_file=str(login))
    first = _fields(login)
    assert first["url"] == "http://127.0.0.1:8123/" and first["username"] == "demo"
    # the next `make demo` runs on another port: same user and password, the new address
    monkeypatch.setenv("RFT_WEB_PORT", "8790")
    call_command("ensure_demo_user", login_file=str(login))
    second = _fields(login)
    assert second == {**first, "url": "http://127.0.0.1:8790/"}


def test_without_rft_web_port_it_is_the_makefiles_default(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_WEB_PORT", raising=False)
    login = tmp_path / "demo_login.txt"
    call_command("ensure_demo_user", login_file=str(login))
    assert _fields(login)["url"] == "http://127.0.0.1:8000/"
