"""``/api/v1/docs/``: the Swagger UI over the OpenAPI schema, for a signed-in user, with its
JS/CSS from drf-spectacular-sidecar's static files (no CDN)."""

from __future__ import annotations

import re

import pytest
from api_helpers import make_user, session_client
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db


def test_it_serves_swagger_ui_over_the_schema_with_vendored_assets():
    page = session_client(make_user("alice")).get("/api/v1/docs/")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.text
    assert "SwaggerUIBundle" in html
    assert "/api/v1/schema/" in html  # the schema it renders
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert not [a for a in assets if a.startswith(("http:", "https:", "//"))], assets
    statics = [a for a in assets if a.startswith("/static/")]
    assert any(a.endswith("swagger-ui-bundle.js") for a in statics), statics
    assert any(a.endswith("swagger-ui.css") for a in statics), statics
    for asset in statics:  # each one is a file the static files app serves
        assert finders.find(asset.removeprefix("/static/")), asset


def test_an_anonymous_visitor_gets_401_as_from_the_schema():
    assert Client().get("/api/v1/docs/").status_code == 401
