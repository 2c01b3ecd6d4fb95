"""RFT Studio dashboard: the Django project (settings, urls, ASGI) and its apps."""
