from django.urls import path

from webapp.runs import views

app_name = "runs"
urlpatterns = [
    path("compare/", views.compare, name="compare"),
    path("launch/<int:experiment_id>/", views.launch, name="launch"),
    path("<int:pk>/", views.run_detail, name="detail"),
    path("<int:pk>/cancel/", views.cancel, name="cancel"),
    path("<int:pk>/clone/", views.clone, name="clone"),
]
