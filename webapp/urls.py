"""URLs are fixed (docs, scripts and bookmarks rely on them):

/ -> /experiments/; /experiments/ (list), /experiments/new/, /experiments/<id>/,
/experiments/<id>/edit/, /experiments/<id>/yaml/; /runs/ (every run); /runs/<id>/; /runs/compare/?ids=1,2;
/runs/import/ and /runs/<id>/evaluations/ (the pages of webapp.ingest and of the checkpoints
app: routed here, since the runs app below them never imports them); /account/ (API tokens); /admin/; the JSON API under /api/v1/ (schema at /api/v1/schema/).
"""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp.accounts.views import home
from webapp.checkpoints import evaluation_views
from webapp.health.views import health_json, health_page
from webapp.ingest import views as import_views

urlpatterns = [
    path("", home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("health/", health_page, name="health"),
    path("health.json", health_json, name="health-json"),
    path("api/health", health_json, name="api-health"),
    path("experiments/", include("webapp.experiments.urls")),
    path("runs/import/", import_views.import_page, name="run-import"),
    path("runs/", include("webapp.runs.urls")),
    path("runs/<int:pk>/evaluations/", evaluation_views.evaluations, name="run-evaluations"),
    path("checkpoints/", include("webapp.checkpoints.urls")),
    path("account/", include("webapp.accounts.urls")),
    path("api/v1/", include("webapp.api.urls")),
    path("admin/", admin.site.urls),
]

# a 403 / 404 as JSON {"detail"} for a request that asks for JSON (webapp/refusals.py)
handler403 = "webapp.refusals.permission_denied"
handler404 = "webapp.refusals.page_not_found"
