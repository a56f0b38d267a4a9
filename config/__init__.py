"""Project configuration: settings, URLs, ASGI/WSGI entry points and the Celery app."""

from config.celery import app as celery_app
from config.lifeline import hold

hold()

__all__ = ["celery_app"]
