"""``/api/v1/docs/``: the Swagger UI over ``/api/v1/schema/`` (drf-spectacular's view, its
assets from drf-spectacular-sidecar: ``SWAGGER_UI_DIST = "SIDECAR"`` in settings).

The page is HTML; a client that asks for JSON (an API client probing the route) gets the same
answers as from the rest of the API, a JSON 401 when not signed in, rather than a 406 from
content negotiation that runs before authentication."""

from __future__ import annotations

from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer, TemplateHTMLRenderer


class DocsHTMLRenderer(TemplateHTMLRenderer):
    """Refusals (401, 403 such as a POST without its CSRF token, 405) as a short page that says
    why (``detail``), not DRF's bare "403 Forbidden"."""

    exception_template_names = ["api/refused.html"]


class ApiDocsView(SpectacularSwaggerView):
    renderer_classes = [DocsHTMLRenderer, JSONRenderer]
    permission_classes = [IsAuthenticated]
    url_name = "api:schema"
