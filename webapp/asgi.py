"""ASGI entry point: HTTP through Django, WebSockets through Channels with session auth.

Other apps add their WebSocket routes to ``websocket_urlpatterns`` below.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django_asgi_app = get_asgi_application()  # before importing consumers: it sets Django up

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.runs.routing import websocket_urlpatterns as event_routes  # noqa: E402

websocket_urlpatterns = [*event_routes]

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
