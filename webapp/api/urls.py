"""``/api/v1/``: the JSON API (see webapp/api/views.py) and its OpenAPI schema.

DRF authenticates these views itself (API token or session with CSRF), so they are exempt
from the site's login-redirect middleware: an anonymous API call gets a 401, not a redirect to
the login page. The schema (``/api/v1/schema/``, YAML; ``?format=json`` for JSON) needs a login
too. ``/api/v1/docs/`` is the Swagger UI over it (signed in: session or token, like the schema),
its JS and CSS served from ``drf-spectacular-sidecar``'s static files (no CDN); its "Try it out"
calls use the page's session and CSRF cookie.
"""

from django.contrib.auth.decorators import login_not_required
from django.urls import path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import IsAuthenticated

from webapp.api import views
from webapp.api.docs import ApiDocsView

app_name = "api"


def api(view_class, **initkwargs):
    return login_not_required(view_class.as_view(**initkwargs))


urlpatterns = [
    path("experiments/", api(views.ExperimentListView), name="experiment-list"),
    path("experiments/<int:pk>/", api(views.ExperimentDetailView), name="experiment-detail"),
    path("experiments/<int:pk>/launch/", api(views.ExperimentLaunchView), name="experiment-launch"),
    path("runs/", api(views.RunListView), name="run-list"),
    path("runs/register/", api(views.RunRegisterView), name="run-register"),
    path("runs/import/", api(views.RunImportView), name="run-import"),
    path("runs/<int:pk>/", api(views.RunDetailView), name="run-detail"),
    path("runs/<int:pk>/finish/", api(views.RunFinishView), name="run-finish"),
    path("runs/<int:pk>/cancel/", api(views.RunCancelView), name="run-cancel"),
    path("runs/<int:pk>/metrics/", api(views.RunMetricsView), name="run-metrics"),
    path("runs/<int:pk>/logs/", api(views.RunLogsView), name="run-logs"),
    path("runs/<int:pk>/checkpoints/", api(views.RunCheckpointsView), name="run-checkpoints"),
    path("runs/<int:pk>/evaluations/", api(views.RunEvaluationsView), name="run-evaluations"),
    path(
        "checkpoints/<int:pk>/convert/",
        api(views.CheckpointConvertView),
        name="checkpoint-convert",
    ),
    path("checkpoints/<int:pk>/fork/", api(views.CheckpointForkView), name="checkpoint-fork"),
    path(
        "schema/",
        api(SpectacularAPIView, permission_classes=[IsAuthenticated]),
        name="schema",
    ),
    path(
        "docs/",
        api(ApiDocsView),
        name="docs",
    ),
]
