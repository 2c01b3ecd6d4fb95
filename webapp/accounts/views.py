"""The landing page (``/`` goes to the experiment list). Login/logout are Django's own auth
views (see webapp/urls.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect


def home(request: HttpRequest) -> HttpResponse:
    return redirect("/experiments/")
