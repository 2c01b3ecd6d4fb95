"""Health page and JSON endpoint. No login required, so load balancers and `make demo` can poll
them; what they show depends on who asks:

* everyone (anonymous, any user): each service up or down, whether supervisord runs the stack,
  and each supervised process up or down;
* staff: also each service's detail (the database, the Redis URL, the Ray address, the Celery
  workers' hostnames, versions) and latency, and each process's state, pid, uptime, restarts
  and last exit (workers/supervision.py counts them).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from webapp.health.checks import SupervisorStatus, check_all, check_supervisor


def _is_staff(request: HttpRequest) -> bool:
    return bool(request.user.is_authenticated and request.user.is_staff)


def _healthy(services, supervisor: SupervisorStatus) -> bool:
    return all(s.up for s in services) and supervisor.up and all(p.up for p in supervisor.processes)


@login_not_required
@never_cache
def health_page(request: HttpRequest) -> HttpResponse:
    services = check_all()
    supervisor = check_supervisor()
    ok = _healthy(services, supervisor)
    context = {
        "services": services,
        "supervisor": supervisor,
        "ok": ok,
        "staff": _is_staff(request),
    }
    return render(request, "health/health.html", context, status=200 if ok else 503)


@login_not_required
@never_cache
def health_json(request: HttpRequest) -> JsonResponse:
    services = check_all()
    supervisor = check_supervisor()
    ok = _healthy(services, supervisor)
    staff = _is_staff(request)
    body = {
        "status": "ok" if ok else "degraded",
        "services": {s.name: s.as_dict() if staff else {"up": s.up} for s in services},
        "supervisor": {
            "in_use": supervisor.in_use,
            "up": supervisor.up,
            **({"detail": supervisor.detail} if staff else {}),
            "processes": {
                p.name: p.as_dict() if staff else {"up": p.up} for p in supervisor.processes
            },
        },
    }
    return JsonResponse(body, status=200 if ok else 503)
