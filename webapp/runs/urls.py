from django.urls import path

from webapp.runs import annotation_views, downloads, live_views, rollout_views, table, views

app_name = "runs"
urlpatterns = [
    path("", table.runs_table, name="list"),
    path("compare/", views.compare, name="compare"),
    path("compare/data.json", views.compare_data, name="compare-data"),
    # /runs/import/ is webapp.ingest's, routed in webapp/urls.py
    path("launch/<int:experiment_id>/", views.launch, name="launch"),
    path("<int:pk>/", views.run_detail, name="detail"),
    path("<int:pk>/cancel/", views.cancel, name="cancel"),
    path("<int:pk>/live.json", live_views.live_json, name="live"),
    path("<int:pk>/clone/", views.clone, name="clone"),
    path("<int:pk>/logs.txt", views.logs_txt, name="logs-txt"),
    path("<int:pk>/rollouts/", rollout_views.rollouts_page, name="rollouts"),
    path("<int:pk>/rollouts.json", rollout_views.rollouts_json, name="rollouts-json"),
    path("<int:pk>/metrics.csv", downloads.metrics_csv, name="metrics-csv"),
    path("<int:pk>/metrics.json", downloads.metrics_json, name="metrics-json"),
    path("<int:pk>/tags/", annotation_views.tags, name="tags"),
    path("<int:pk>/notes/", annotation_views.notes, name="notes"),
    # /runs/<id>/evaluations/ is the checkpoints app's, routed in webapp/urls.py
]
