from django.urls import path

from webapp.checkpoints import evaluation_views
from webapp.runs import live_views, views

app_name = "runs"
urlpatterns = [
    path("compare/", views.compare, name="compare"),
    path("compare/data.json", views.compare_data, name="compare-data"),
    path("import/", views.import_page, name="import"),
    path("launch/<int:experiment_id>/", views.launch, name="launch"),
    path("<int:pk>/", views.run_detail, name="detail"),
    path("<int:pk>/cancel/", views.cancel, name="cancel"),
    path("<int:pk>/live.json", live_views.live_json, name="live"),
    path("<int:pk>/clone/", views.clone, name="clone"),
    path("<int:pk>/logs.txt", views.logs_txt, name="logs-txt"),
    path("<int:pk>/evaluations/", evaluation_views.evaluations, name="evaluations"),
]
