from django.apps import AppConfig


class EventsConfig(AppConfig):
    name = "webapp.events"
    label = "events"
    verbose_name = "Run events"
