"""WSGI entry point (no SSE streaming under WSGI; use the ASGI one for the service)."""

import os

from django.core.wsgi import get_wsgi_application

from core.startup import StartupError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

try:
    application = get_wsgi_application()
except StartupError as exc:  # a wrong setting is its one line, in every worker of the server
    raise SystemExit(f"error: {exc}") from None
