from django.urls import re_path

from webapp.runs.consumers import RunEventsConsumer
from webapp.runs.list_consumer import RunListConsumer

websocket_urlpatterns = [
    re_path(r"^ws/runs/$", RunListConsumer.as_asgi()),  # the list feed (list_consumer.py)
    # the run's primary key; anything else is answered 4404 by the consumer, not a routing error
    re_path(r"^ws/runs/(?P<run_id>[^/]{1,80})/$", RunEventsConsumer.as_asgi()),
]
