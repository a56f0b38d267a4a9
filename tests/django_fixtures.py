"""Fixtures for the Django service's tests: users with API keys, an API client, clean Redis."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def broker_pointed_at_nothing() -> Iterator[None]:
    """The Celery app's broker on a port where nothing listens, restored afterwards."""
    from config.celery import app

    original = app.conf.broker_url
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    app._pool = None
    app.amqp._producer_pool = None
    try:
        yield
    finally:
        app.conf.broker_url = original
        app._pool = None
        app.amqp._producer_pool = None


@pytest.fixture(scope="session")
def redis_client() -> Any:
    from chat.redis_store import client

    redis = client()
    redis.ping()
    return redis


@pytest.fixture
def service(transactional_db: None, redis_client: Any) -> Any:
    """A clean service: an empty test database (pytest-django) and an empty test Redis db."""
    from django.conf import settings

    assert settings.REDIS_URL.rsplit("/", 1)[-1] != "0", "tests must not use the default Redis database"
    redis_client.flushdb()
    return redis_client


class Caller:
    """An API client bound to one user's key."""

    def __init__(self, user: Any, key: str, webhook_secret: str = "") -> None:
        from rest_framework.test import APIClient

        self.user = user
        self.key = key
        #: the key's webhook signing secret (``whsec_…``), as create_api_key prints it
        self.webhook_secret = webhook_secret
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.client.get(path, **kwargs)

    def post(self, path: str, data: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("format", "json")
        return self.client.post(path, data, **kwargs)


def make_caller(username: str, *, staff: bool = False) -> Caller:
    from chat.services import api_key_create

    key, raw, webhook_secret = api_key_create(username=username, staff=staff)
    return Caller(key.user, raw, webhook_secret)


@pytest.fixture
def alice(service: Any) -> Caller:
    return make_caller("alice")


@pytest.fixture
def bob(service: Any) -> Caller:
    return make_caller("bob")


@pytest.fixture
def staff(service: Any) -> Caller:
    return make_caller("oncall-lead", staff=True)
