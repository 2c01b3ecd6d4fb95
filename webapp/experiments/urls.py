"""Experiment URLs (fixed: docs, scripts and bookmarks rely on them)."""

from django.urls import path

from webapp.experiments import views

app_name = "experiments"
urlpatterns = [
    path("", views.experiment_list, name="list"),
    path("new/", views.experiment_new, name="new"),
    path("form/convert/", views.form_convert, name="convert"),
    path("<int:pk>/", views.experiment_detail, name="detail"),
    path("<int:pk>/edit/", views.experiment_edit, name="edit"),
    path("<int:pk>/yaml/", views.experiment_yaml, name="yaml"),
    path("<int:pk>/clone/", views.experiment_clone, name="clone"),
    path("<int:pk>/delete/", views.experiment_delete, name="delete"),
    path("<int:pk>/versions/", views.experiment_versions, name="versions"),
]
