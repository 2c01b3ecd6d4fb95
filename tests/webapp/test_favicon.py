"""The site's icon: ``/favicon.ico`` answers without a login (a browser asks for it on every
page, the admin's included) and every page links the vendored icons."""

from __future__ import annotations

import pytest
from api_helpers import make_user, session_client
from django.contrib.staticfiles import finders
from django.test import Client
from PIL import Image

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_served_to_anyone(tmp_path):
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 200
    body = b"".join(answer.streaming_content)
    (tmp_path / "f.ico").write_bytes(body)
    assert Image.open(tmp_path / "f.ico").format == "ICO"


def test_pages_link_the_vendored_icons():
    html = session_client(make_user("alice")).get("/experiments/").text
    assert 'rel="icon" href="/static/favicon.svg"' in html
    assert 'rel="icon" href="/favicon.ico"' in html
    assert finders.find("favicon.svg")
