from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "webapp.checkpoints"
    label = "checkpoints"

    def ready(self) -> None:
        from webapp.checkpoints import receivers  # noqa: F401 - connects run_finished
