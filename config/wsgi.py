"""WSGI entry point (no SSE streaming under WSGI; use the ASGI one for the service)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()
