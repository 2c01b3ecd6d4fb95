from django.urls import re_path

from webapp.events.consumers import RunEventsConsumer

websocket_urlpatterns = [
    # the run's primary key; anything else is answered 4404 by the consumer, not a routing error
    re_path(r"^ws/runs/(?P<run_id>[^/]{1,80})/$", RunEventsConsumer.as_asgi()),
]
