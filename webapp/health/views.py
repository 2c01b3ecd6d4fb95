"""Health page and JSON endpoint: each service up or down with the reason. No login required,
so load balancers and `make demo` can poll it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from webapp.health.checks import check_all


@login_not_required
@never_cache
def health_page(request: HttpRequest) -> HttpResponse:
    services = check_all()
    ok = all(s.up for s in services)
    return render(
        request, "health/health.html", {"services": services, "ok": ok}, status=200 if ok else 503
    )


@login_not_required
@never_cache
def health_json(request: HttpRequest) -> JsonResponse:
    services = check_all()
    ok = all(s.up for s in services)
    body = {
        "status": "ok" if ok else "degraded",
        "services": {s.name: s.as_dict() for s in services},
    }
    return JsonResponse(body, status=200 if ok else 503)
