from django.urls import path

from webapp.checkpoints import views

app_name = "checkpoints"
urlpatterns = [
    path("<int:pk>/convert/", views.convert, name="convert"),
    path("<int:pk>/fork/", views.fork, name="fork"),
    path("<int:pk>/files.json", views.files_json, name="files-json"),
]
