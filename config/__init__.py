"""Project configuration: settings, URLs, ASGI/WSGI entry points and the Celery app."""

from config.celery import app as celery_app
from config.lifeline import hold
from core.startup import report_startup_errors

# uvicorn and Celery load the settings themselves: a wrong one is a line, not a traceback
report_startup_errors()
hold()

__all__ = ["celery_app"]
