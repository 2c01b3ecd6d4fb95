from django.urls import re_path

from webapp.events.consumers import RunEventsConsumer

websocket_urlpatterns = [
    re_path(r"^ws/runs/(?P<run_id>[A-Za-z0-9_.-]{1,80})/$", RunEventsConsumer.as_asgi()),
]
