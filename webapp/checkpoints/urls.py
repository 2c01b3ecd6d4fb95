from django.urls import path

from webapp.checkpoints import archive, views

app_name = "checkpoints"
urlpatterns = [
    path("<int:pk>/convert/", views.convert, name="convert"),
    path("<int:pk>/fork/", views.fork, name="fork"),
    path("<int:pk>/files.json", views.files_json, name="files-json"),
    path("run/<int:run_pk>/disk.json", views.disk_json, name="disk-json"),
    path("<int:pk>/hf.tar", archive.hf_archive, name="hf-archive"),
]
